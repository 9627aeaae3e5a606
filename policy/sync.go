package policy

import "sync"

// Sync makes a policy safe for concurrent use by serialising every call
// through one mutex. It owns the wrapped policy: use it only through Sync.
type Sync[K comparable] struct {
	mu sync.Mutex
	p  Policy[K]
}

// Synchronized wraps p with a mutex.
func Synchronized[K comparable](p Policy[K]) *Sync[K] { return &Sync[K]{p: p} }

// Add calls the wrapped Add under the lock.
func (s *Sync[K]) Add(k K, size int64, cost float64) []Eviction[K] {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.p.Add(k, size, cost)
}

// Get calls the wrapped Get under the lock.
func (s *Sync[K]) Get(k K) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.p.Get(k)
}

// Contains calls the wrapped Contains under the lock.
func (s *Sync[K]) Contains(k K) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.p.Contains(k)
}

// Remove calls the wrapped Remove under the lock.
func (s *Sync[K]) Remove(k K) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.p.Remove(k)
}

// Len calls the wrapped Len under the lock.
func (s *Sync[K]) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.p.Len()
}

// Bytes calls the wrapped Bytes under the lock.
func (s *Sync[K]) Bytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.p.Bytes()
}

// Sweep calls the wrapped policy's Sweep under the lock when it has one
// (see Sweeper); otherwise it returns nil.
func (s *Sync[K]) Sweep() []Eviction[K] {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sw, ok := s.p.(Sweeper[K]); ok {
		return sw.Sweep()
	}
	return nil
}

// Do runs fn with the lock held, for compound operations such as
// "Get, and Add on a miss" that must be atomic. fn must not retain p.
func (s *Sync[K]) Do(fn func(p Policy[K])) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fn(s.p)
}

var (
	_ Policy[string]  = (*Sync[string])(nil)
	_ Sweeper[string] = (*Sync[string])(nil)
)
