package cache

import "context"

// Pending is what a missed lookup leaves for storing the answer later: the
// prepared key and the query vector the lookup computed, so that the store
// does not normalise and embed the key again (Do does the same inside one
// call; Pending serves callers whose generation outlives the lookup's
// call, e.g. a stream finishing in an HTTP body writer).
type Pending struct {
	c   *Cache
	req *Request
	p   prepared
	v   []float32
}

// GetPending looks req up like Get. On a miss it also returns the Pending
// that stores the answer; on a hit the Pending is nil.
func (c *Cache) GetPending(ctx context.Context, req *Request) (Lookup, *Pending, error) {
	l, v, err := c.get(ctx, req)
	if l.Hit {
		return l, nil, err
	}
	return l, &Pending{c: c, req: req, p: c.prepare(req), v: v}, err
}

// Put stores the answer as Cache.Put would, reusing the lookup's vector.
// Safe on a nil Pending (nothing to store).
func (p *Pending) Put(ctx context.Context, response []byte, cost float64) error {
	if p == nil {
		return nil
	}
	return p.c.put(ctx, p.req, p.p, p.v, response, cost)
}
