package store

import "encoding/binary"

// Key prefixes; the layout is described in doc.go.
const (
	prefixCounter = 'c' // 'c' kind → last id assigned for the kind
	prefixDef     = 'd' // 'd' kind id(8) → definition record
	prefixMsg     = 'm' // 'm' queue(8) seq(8) → message; + 'd' → delivery mark
	prefixSpill   = 'p' // 'p' page(8) seq(8) → message paged out of RAM (this run only)
	prefixRepl    = 'q' // 'q' group(2) queue(6) seq(8) → body of a replicated queue's message
	markSuffix    = 'd'
)

// schemaKey holds the schema version of the whole database.
var schemaKey = []byte("\x00schema-version")

const (
	msgKeyLen  = 1 + 8 + 8
	markKeyLen = msgKeyLen + 1
	defKeyLen  = 1 + 1 + 8
)

// putMarkKey writes the delivery-mark key of (queueID, seq) into b[:markKeyLen];
// b[:msgKeyLen] is then the message key.
func putMarkKey(b []byte, queueID, seq uint64) {
	b[0] = prefixMsg
	binary.BigEndian.PutUint64(b[1:9], queueID)
	binary.BigEndian.PutUint64(b[9:17], seq)
	b[17] = markSuffix
}

func putMsgKey(b []byte, queueID, seq uint64) {
	b[0] = prefixMsg
	binary.BigEndian.PutUint64(b[1:9], queueID)
	binary.BigEndian.PutUint64(b[9:17], seq)
}

func msgKey(queueID, seq uint64) []byte {
	b := make([]byte, msgKeyLen)
	putMsgKey(b, queueID, seq)
	return b
}

func markKey(queueID, seq uint64) []byte {
	b := make([]byte, markKeyLen)
	putMarkKey(b, queueID, seq)
	return b
}

// queuePrefix is the prefix of every key of a queue's messages and marks.
func queuePrefix(queueID uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{prefixMsg}, queueID)
}

// parseQueueKey splits a key under queuePrefix: seq, and whether it is a delivery mark.
func parseQueueKey(k []byte) (seq uint64, mark, ok bool) {
	switch {
	case len(k) == msgKeyLen && k[0] == prefixMsg:
		return binary.BigEndian.Uint64(k[9:17]), false, true
	case len(k) == markKeyLen && k[0] == prefixMsg && k[17] == markSuffix:
		return binary.BigEndian.Uint64(k[9:17]), true, true
	}
	return 0, false, false
}

func defKey(kind Kind, id uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{prefixDef, byte(kind)}, id)
}

func defPrefix(kind Kind) []byte { return []byte{prefixDef, byte(kind)} }

func counterKey(kind Kind) []byte { return []byte{prefixCounter, byte(kind)} }

// appliedKey holds the index of the last replicated definition command
// whose effect is stored (UpdateApplied): 'c' 0, beside the id counters.
var appliedKey = []byte{prefixCounter, 0}
