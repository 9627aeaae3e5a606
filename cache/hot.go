package cache

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/specgate/specgate/policy"
)

// Renderer turns a stored response into a form ready to write (for the
// gateway: the JSON body and the SSE replay with holes for the per-request
// id and created time). It runs once when an entry enters the hot tier, not
// per hit; view is returned in Lookup.View for every hit on that entry and
// must be safe for concurrent read-only use. size is the view's accounting
// size in bytes (it counts against HotBytes). A nil view is allowed (the
// caller then falls back to Lookup.Response). The response passed in is
// shared with the cache: read it, never modify or keep a writable alias.
type Renderer func(response []byte) (view any, size int64)

// hotKey identifies an entry in the hot tier; the namespace is part of it,
// exactly as in the store, so the hot tier cannot serve one tenant's entry
// to another.
type hotKey struct{ ns, id string }

// hotEntry is one entry held in memory, ready to serve.
type hotEntry struct {
	key     string // normalized key text (compared on exact hits, guarded on semantic ones)
	resp    []byte // the stored response; shared, read-only
	view    any    // the Renderer's view, nil without one
	expires time.Time
	toks    atomic.Pointer[[]token] // tokenize(key), made at the first guard run
}

// tokens returns the key's tokens for the guard, tokenizing it once per
// entry (concurrent first calls may both tokenize; the results are equal).
func (e *hotEntry) tokens() []token {
	if t := e.toks.Load(); t != nil {
		return *t
	}
	t := tokenize(e.key)
	e.toks.Store(&t)
	return t
}

// hotOverhead approximates the per-entry bookkeeping bytes (map slot,
// policy node, strings' headers) added to an entry's accounting size.
const hotOverhead = 160

// hotTier is the in-memory index of hot entries in front of the store: an
// exact hit on a hot entry costs a map lookup (no store read, no copy), and
// a semantic candidate that is hot is fetched from it too. It is bounded in
// bytes by a policy from package policy (Config.HotPolicy, default s3fifo).
// Entries enter on Put and when a store read finds them; they leave when the
// policy evicts them, when the cache evicts or forgets the entry, and when
// they are found expired.
//
// Consistency: with a store shared by several replicas (Redis), another
// replica's later Put of the same id (same namespace and key text, a newer
// answer) or its eviction is not seen here until this tier drops the entry;
// TTLs are always honoured (each entry carries its deadline).
type hotTier struct {
	mu     sync.Mutex
	m      map[hotKey]*hotEntry
	pol    policy.Policy[hotKey]
	render atomic.Pointer[Renderer]
}

func newHotTier(name string, maxBytes int64) (*hotTier, error) {
	p, err := policy.New[hotKey](name, policy.Capacity{MaxBytes: maxBytes})
	if err != nil {
		return nil, err
	}
	return &hotTier{m: map[hotKey]*hotEntry{}, pol: p}, nil
}

// get returns the live hot entry of (ns, id), dropping it when expired.
func (h *hotTier) get(ns, id string, now time.Time) *hotEntry {
	k := hotKey{ns, id}
	h.mu.Lock()
	e := h.m[k]
	if e != nil {
		if !e.expires.IsZero() && !now.Before(e.expires) {
			delete(h.m, k)
			h.pol.Remove(k)
			e = nil
		} else {
			h.pol.Get(k)
		}
	}
	h.mu.Unlock()
	return e
}

// put makes (ns, id) hot. resp is kept, not copied: callers pass a slice
// nobody writes to afterwards.
func (h *hotTier) put(ns, id, key string, resp []byte, expires time.Time) *hotEntry {
	e := &hotEntry{key: key, resp: resp, expires: expires}
	size := int64(len(ns)+len(id)+len(key)+len(resp)) + hotOverhead
	if r := h.render.Load(); r != nil {
		var vs int64
		e.view, vs = (*r)(resp)
		size += vs
	}
	k := hotKey{ns, id}
	h.mu.Lock()
	h.m[k] = e
	for _, ev := range h.pol.Add(k, size, 1) {
		delete(h.m, ev.Key)
	}
	h.mu.Unlock()
	return e
}

// remove drops (ns, id).
func (h *hotTier) remove(ns, id string) {
	k := hotKey{ns, id}
	h.mu.Lock()
	if _, ok := h.m[k]; ok {
		delete(h.m, k)
		h.pol.Remove(k)
	}
	h.mu.Unlock()
}

// clear drops every entry (a new Renderer makes the old views stale).
func (h *hotTier) clear() {
	h.mu.Lock()
	for k := range h.m {
		h.pol.Remove(k)
	}
	clear(h.m)
	h.mu.Unlock()
}

// stats returns the number of hot entries and their accounted bytes.
func (h *hotTier) stats() (int, int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.m), h.pol.Bytes()
}
