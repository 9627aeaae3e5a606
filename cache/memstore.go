package cache

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// MemStore is an in-memory Store (tests, benchmarks, single-process use
// without persistence). Entries are copied in and out. Safe for concurrent use.
type MemStore struct {
	mu     sync.RWMutex
	m      map[[2]string]*Entry
	now    func() time.Time
	closed bool
}

// NewMemStore returns an empty MemStore. now may be nil (time.Now).
func NewMemStore(now func() time.Time) *MemStore {
	if now == nil {
		now = time.Now
	}
	return &MemStore{m: map[[2]string]*Entry{}, now: now}
}

func cloneEntry(e *Entry) *Entry {
	c := *e
	c.Response = append([]byte(nil), e.Response...)
	if e.Vector != nil {
		c.Vector = append([]float32(nil), e.Vector...)
	}
	return &c
}

func (s *MemStore) live(e *Entry) bool {
	return e.ExpiresAt.IsZero() || s.now().Before(e.ExpiresAt)
}

// Put stores a copy of e.
func (s *MemStore) Put(_ context.Context, e *Entry) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.m[[2]string{e.Namespace, e.ID}] = cloneEntry(e)
	return nil
}

// Get returns a copy of the entry.
func (s *MemStore) Get(_ context.Context, namespace, id string) (*Entry, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, ErrClosed
	}
	e, ok := s.m[[2]string{namespace, id}]
	if !ok || !s.live(e) {
		return nil, fmt.Errorf("memstore: %s: %w", id, ErrNotFound)
	}
	return cloneEntry(e), nil
}

// Delete removes the entry; absent ids are not an error.
func (s *MemStore) Delete(_ context.Context, namespace, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	delete(s.m, [2]string{namespace, id})
	return nil
}

// Touch increments the hit count.
func (s *MemStore) Touch(_ context.Context, namespace, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	e, ok := s.m[[2]string{namespace, id}]
	if !ok || !s.live(e) {
		return fmt.Errorf("memstore: touch %s: %w", id, ErrNotFound)
	}
	e.Hits++
	return nil
}

// Scan visits copies of the live entries of namespace ("" = all). fn must
// not call back into the store.
func (s *MemStore) Scan(_ context.Context, namespace string, fn func(*Entry) error) error {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return ErrClosed
	}
	var es []*Entry
	for k, e := range s.m {
		if (namespace == "" || k[0] == namespace) && s.live(e) {
			es = append(es, cloneEntry(e))
		}
	}
	s.mu.RUnlock()
	for _, e := range es {
		if err := fn(e); err != nil {
			return err
		}
	}
	return nil
}

// Close makes later calls fail with ErrClosed.
func (s *MemStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

var _ Store = (*MemStore)(nil)
