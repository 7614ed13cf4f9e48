package broker

import (
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/warrenmq/warren/amqp"
)

// Panics in connection goroutines. A panic that one client's input can
// reach must end that connection, not the broker: the reader and the
// writer recover, log the panic with its stack, and close the connection
// with 541 INTERNAL_ERROR, as RabbitMQ does when a channel process
// crashes. A panic while a lock was held leaves it held: the code under
// the locks of doc.go must not panic, and this is the last line, not a
// licence.

// errPanic is what a recovered panic closes the connection with.
var errPanic = amqp.Errorf(amqp.InternalError, 0, 0, "internal error")

// Test hooks (export_test.go): testMethodHook runs before the reader
// handles each channel method, testWriteHook before each flush of the
// writer, with the client's connection_name.
var (
	testMethodHook atomic.Pointer[func(amqp.Method)]
	testWriteHook  atomic.Pointer[func(string)]
)

// logPanic logs a recovered panic of goroutine with the stack of the
// panic (called from the deferred function that recovered it).
func (c *conn) logPanic(goroutine string, r any) {
	c.log.Error("panic in connection "+goroutine+", closing the connection",
		zap.Any("panic", r), zap.StackSkip("stack", 2))
}

// runRecovered is run, with a panic turned into the end of the
// connection: 541 to the peer, then the wait for its close-ok.
func (c *conn) runRecovered() (err error) {
	defer func() {
		if r := recover(); r != nil {
			c.logPanic("reader", r)
			err = c.failRecovered(errPanic)
		}
	}()
	return c.run()
}

// failRecovered is fail after a panic; a second panic there ends the
// connection without more ado.
func (c *conn) failRecovered(ae *amqp.Error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			c.logPanic("reader", r)
			err = ae
		}
	}()
	return c.fail(ae)
}

// teardownRecovered is teardown; a panic there still closes the socket.
func (c *conn) teardownRecovered(linger bool) {
	defer func() {
		if r := recover(); r != nil {
			c.logPanic("teardown", r)
			_ = c.nc.Close()
		}
	}()
	c.teardown(linger)
}

// writerPanicked ends the writer after a panic: it writes what is pending
// and a connection.close 541, once, within closeTimeout, and leaves the
// rest to the reader (which waits for close-ok and tears down).
func (c *conn) writerPanicked(r any) {
	c.logPanic("writer", r)
	defer func() {
		if r := recover(); r != nil {
			c.logPanic("writer", r)
			_ = c.nc.Close()
		}
	}()
	c.sendClose(errPanic)
	_ = c.nc.SetWriteDeadline(time.Now().Add(closeTimeout))
	if !c.flush() {
		c.out.mu.Lock()
		c.out.closed = true
		c.out.mu.Unlock()
	}
}
