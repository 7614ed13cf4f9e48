// Package cluster will make several Warren nodes one broker: it implements the
// replication interfaces the broker declares (broker/replication.go) with
// Raft (github.com/hashicorp/raft), one metadata group and a bounded pool of
// data groups, whose logs live in the node's store (store.Log) and go through
// its one group-commit writer.
//
// For now it holds only a test: raftstore_test.go adapts a store.Log to
// Raft's LogStore and StableStore and runs real Raft groups on it, which shows
// that the store's log API is enough for Raft without the store importing it.
package cluster
