package broker_test

import (
	"context"
	"fmt"
	"testing"

	badger "github.com/dgraph-io/badger/v4"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// TestRecoverySkipsCorruptMessage damages one journaled message on disk
// and checks that recovery skips it and brings back the rest, in order.
func TestRecoverySkipsCorruptMessage(t *testing.T) {
	dir := t.TempDir()
	s, stop := startOn(t, dir)
	ch := open(t, dial(t, s))
	if _, err := ch.QueueDeclare("cq", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Tx(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if err := ch.PublishWithContext(context.Background(), "", "cq", false, false, amqp091.Publishing{
			DeliveryMode: amqp091.Persistent, Body: []byte(fmt.Sprintf("m%d", i)),
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := ch.TxCommit(); err != nil {
		t.Fatal(err)
	}
	stop()

	// Flip a byte in the third message record ('m' queue-id seq keys,
	// in order), behind the store's back.
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{'m'}})
		defer it.Close()
		n := 0
		for it.Rewind(); it.Valid(); it.Next() {
			if len(it.Item().Key()) != 17 { // a message, not a delivery mark
				continue
			}
			if n++; n != 3 {
				continue
			}
			key := it.Item().KeyCopy(nil)
			val, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			val[len(val)-1] ^= 0xff
			return txn.Set(key, val)
		}
		return fmt.Errorf("found %d message records", n)
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}

	s, stop = startOn(t, dir)
	defer stop()
	ch = open(t, dial(t, s))
	var got []string
	for {
		m, ok, err := ch.Get("cq", true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		got = append(got, string(m.Body))
	}
	if fmt.Sprint(got) != "[m0 m1 m3 m4]" {
		t.Fatalf("recovered %v, want the four intact messages in order", got)
	}
}
