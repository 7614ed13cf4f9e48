//go:build !linux

package store

// trimLoop does nothing off Linux: there is no MADV_PAGEOUT (trim_linux.go).
func (s *Store) trimLoop() { s.wg.Done() }

func (s *Store) trimMappings() {}
