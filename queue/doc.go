// Package queue holds one queue's logic as a deterministic state machine:
// ready messages, consumers and their credit and priorities, dispatch
// order, the counts of unacknowledged deliveries, message TTL, length
// limits, message priorities, single active consumer, delivery limits and
// the dead-letter decisions (with the x-death bookkeeping of AddDeath).
//
// A Queue owns no goroutine, does no I/O and reads no clock. The caller (the
// broker) serialises every call with its own lock, feeds commands in
// (Publish, AddConsumer, Dispatch, Settle, Return, Purge, SetConfig, and
// the *At variants that carry the time as unix ms) and carries out the
// effects that come back (the deliveries returned by Dispatch and Get, the
// DeadLetters of expiry, length limits, rejects and delivery limits).
//
// Unacknowledged deliveries are owned by whoever received them: the queue
// counts them per consumer (for prefetch) and in total (for message counts),
// and takes them back with Return, in their original order, marked
// redelivered.
package queue
