package testenv

import (
	"bytes"
	"sync"
)

// Buffer is an output buffer for a process a test starts: the process writes it from
// os/exec's copying goroutines while the test reads it (in a wait condition, or a failure
// message), so every access is under one lock.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
