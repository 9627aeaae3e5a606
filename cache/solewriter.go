package cache

import (
	"context"
	"time"
)

// SoleWriter is an optional Store capability: every write to the store goes
// through the one Cache built over it (a SQLite file of one process, not a
// store shared by replicas such as Redis). Such a Cache's eviction state,
// rebuilt from the store at start-up and updated on every Put and eviction,
// then knows every stored id, so an exact lookup of an id it does not know
// is a miss without a store read (a semantic hit's exact-tier miss cost
// about a tenth of its CPU in a SQLite read). New uses it only when it
// rebuilds from the store (not with WithoutRebuild).
type SoleWriter interface {
	SoleWriter() bool
}

// soleWriter reports whether store declares itself SoleWriter.
func soleWriter(store Store) bool {
	sw, ok := store.(SoleWriter)
	return ok && sw.SoleWriter()
}

// known reports whether the eviction state of ns holds id (a live entry).
func (c *Cache) known(ns, id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.ns[ns]
	return s != nil && s.pol.Contains(id)
}

// fetchExact is fetch for the exact tier: with a SoleWriter store, an id
// the eviction state does not know is ErrNotFound without a store read.
func (c *Cache) fetchExact(ctx context.Context, ns, id string, now time.Time) (*hotEntry, error) {
	if !c.sole {
		return c.fetch(ctx, ns, id, now)
	}
	if c.hot != nil {
		if he := c.hot.get(ns, id, now); he != nil {
			return he, nil
		}
	}
	if !c.known(ns, id) {
		return nil, ErrNotFound
	}
	return c.fetchStore(ctx, ns, id)
}

// SoleWriter: a SQLite cache file belongs to one process and the one Cache
// built over it (as its in-process HNSW index does: both are rebuilt from
// the file at start-up). Another process writing the same file is not seen
// by the exact tier until restart, just as its vectors are not seen by the
// semantic tier. To share a store between replicas, use Redis.
func (s *SQLiteStore) SoleWriter() bool { return true }
