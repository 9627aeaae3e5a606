package gateway

import (
	"sync"
	"sync/atomic"
)

// children memoises a metric vector's children by their label values, so
// that a request's Inc or Observe costs one map read instead of
// WithLabelValues' label validation, hashing and read lock (profile of an
// exact cache hit: six WithLabelValues calls a request, docs/cache.md).
// The map is copied on write (a new label combination: rare, the sets are
// bounded: routes, status codes, model names, outcomes) and read without a
// lock. Only for vectors whose children are never deleted.
type children[K comparable, M any] struct {
	mu  sync.Mutex
	m   atomic.Pointer[map[K]M]
	new func(K) M // the vector's WithLabelValues for k
}

func newChildren[K comparable, M any](new func(K) M) *children[K, M] {
	return &children[K, M]{new: new}
}

// of returns the child for k.
func (c *children[K, M]) of(k K) M {
	if m := c.m.Load(); m != nil {
		if v, ok := (*m)[k]; ok {
			return v
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.m.Load()
	if old != nil {
		if v, ok := (*old)[k]; ok {
			return v
		}
	}
	next := make(map[K]M, 1)
	if old != nil {
		for k2, v := range *old {
			next[k2] = v
		}
	}
	v := c.new(k)
	next[k] = v
	c.m.Store(&next)
	return v
}
