//go:build !amd64

package broker

import "unsafe"

// prefetch is a no-op where Warren has no prefetch instruction for it.
func prefetch(unsafe.Pointer) {}
