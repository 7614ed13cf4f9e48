package broker

import "unsafe"

// prefetch asks the CPU to bring the cache line at p into its caches
// without waiting for it (PREFETCHT0). It reads nothing the program
// sees: it is a hint, safe on any address.
//
//go:noescape
func prefetch(p unsafe.Pointer)
