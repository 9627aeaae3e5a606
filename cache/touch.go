package cache

import (
	"context"
	"errors"
	"time"
)

// Hit is a number of hits on one entry, for HitAdder.
type Hit struct {
	Namespace, ID string
	N             int64
}

// HitAdder is an optional Store capability: record many hits at once (the
// SQLite store does it in one transaction). The cache counts hits in memory
// and flushes them every touchInterval; stores without it get one Touch per
// hit at flush time.
type HitAdder interface {
	AddHits(ctx context.Context, hits []Hit) error
}

// touchInterval is how often counted hits are written to the store;
// maxPendingHits bounds the distinct entries counted in between (hits on
// further entries are not counted: hit counts are statistics).
const (
	touchInterval  = 30 * time.Second
	maxPendingHits = 1 << 16
)

// toucher writes the hits counted by served to the store every
// touchInterval and at Close, off the request path: a hit costs a map
// increment under the lock it already takes, not a store write.
func (c *Cache) toucher() {
	defer c.wg.Done()
	t := time.NewTicker(touchInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			c.flushHits()
		case <-c.stop:
			c.flushHits()
			return
		}
	}
}

// flushHits writes the counted hits to the store.
func (c *Cache) flushHits() {
	c.mu.Lock()
	pending := c.hits
	if len(pending) == 0 {
		c.mu.Unlock()
		return
	}
	c.hits = make(map[hotKey]int64, len(pending))
	c.mu.Unlock()
	ctx := context.Background()
	if ha, ok := c.store.(HitAdder); ok {
		hits := make([]Hit, 0, len(pending))
		for k, n := range pending {
			hits = append(hits, Hit{k.ns, k.id, n})
		}
		if err := ha.AddHits(ctx, hits); err != nil {
			c.m.errors.WithLabelValues("store-touch").Inc()
		}
	} else {
		for k, n := range pending {
			for range n {
				if err := c.store.Touch(ctx, k.ns, k.id); err != nil {
					if !errors.Is(err, ErrNotFound) {
						c.m.errors.WithLabelValues("store-touch").Inc()
					}
					break
				}
			}
		}
	}
}
