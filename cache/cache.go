package cache

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/singleflight"

	"github.com/specgate/specgate/policy"
)

// Persistent is an optional capability of a VectorIndex whose vectors survive
// restarts on their own (e.g. Milvus). New does not re-add stored vectors to
// such an index at start-up.
type Persistent interface {
	Persistent() bool
}

// Option configures New.
type Option func(*options)

type options struct {
	reg       prometheus.Registerer
	now       func() time.Time
	noRebuild bool
	logf      func(format string, args ...any)
}

// WithRegisterer registers the cache's metrics on reg (nil: not registered).
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(o *options) { o.reg = reg }
}

// WithClock replaces time.Now (tests).
func WithClock(now func() time.Time) Option {
	return func(o *options) { o.now = now }
}

// WithoutRebuild skips the start-up scan of the store (the policy then only
// knows entries written by this process).
func WithoutRebuild() Option {
	return func(o *options) { o.noRebuild = true }
}

// WithLogger sets a printf-style logger for background errors.
func WithLogger(logf func(format string, args ...any)) Option {
	return func(o *options) { o.logf = logf }
}

// Cache is the semantic cache pipeline: pre-process → exact tier → embed →
// vector search → similarity threshold → false-positive guard, plus storage
// with per-namespace eviction and single-flight generation. It is safe for
// concurrent use. It does not own store, index or embedder: Close leaves them
// open for the caller to close.
type Cache struct {
	cfg   Config
	store Store
	index VectorIndex
	emb   Embedder
	m     *metrics
	now   func() time.Time
	logf  func(format string, args ...any)

	mu  sync.Mutex
	ns  map[string]*nsState // by namespace
	agg map[string]*aggState

	hot  *hotTier // nil when Config.HotBytes < 0
	sole bool     // store is a SoleWriter and the eviction state was rebuilt from it

	sf     singleflight.Group
	hits   map[hotKey]int64 // counted by served, written by the toucher; under mu
	stop   chan struct{}
	wg     sync.WaitGroup
	closed sync.Once
}

type nsState struct {
	label string // tenant/model metric label
	pol   *policy.TTL[string]
}

type aggState struct{ entries, bytes int64 }

// New builds a cache over store, index and emb. index and emb may be nil only
// when cfg.DisableSemantic is set. Unless WithoutRebuild is given, New scans
// the store once to rebuild the eviction state and (for in-process indexes)
// the vector index; entries whose vector has another dimension than emb are
// re-embedded from their key.
func New(cfg Config, store Store, index VectorIndex, emb Embedder, opts ...Option) (*Cache, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.withDefaults()
	if store == nil {
		return nil, fmt.Errorf("%w: store is nil", ErrConfig)
	}
	if !cfg.DisableSemantic && (index == nil || emb == nil) {
		return nil, fmt.Errorf("%w: semantic tier needs an index and an embedder (or disable_semantic)", ErrConfig)
	}
	o := options{now: time.Now, logf: func(string, ...any) {}}
	for _, f := range opts {
		f(&o)
	}
	m, err := newMetrics(o.reg)
	if err != nil {
		return nil, fmt.Errorf("cache: registering metrics: %w", err)
	}
	c := &Cache{
		cfg: cfg, store: store, index: index, emb: emb, m: m, now: o.now, logf: o.logf,
		ns:   map[string]*nsState{},
		agg:  map[string]*aggState{},
		hits: map[hotKey]int64{},
		stop: make(chan struct{}),
	}
	if cfg.HotBytes > 0 {
		if c.hot, err = newHotTier(cfg.HotPolicy, cfg.HotBytes); err != nil {
			return nil, fmt.Errorf("%w: hot tier: %w", ErrConfig, err)
		}
	}
	if !o.noRebuild {
		if err := c.rebuild(context.Background()); err != nil {
			return nil, err
		}
		c.sole = soleWriter(store)
	}
	c.wg.Add(2)
	go c.toucher()
	go c.janitor()
	return c, nil
}

// Close stops the background goroutines. It does not close store or index.
func (c *Cache) Close() error {
	c.closed.Do(func() {
		close(c.stop)
		c.wg.Wait()
	})
	return nil
}

// Config returns the effective configuration (defaults applied).
func (c *Cache) Config() Config { return c.cfg }

// SetRenderer sets the function that pre-renders responses as they enter
// the hot tier; hits then carry its result in Lookup.View. Entries already
// hot are dropped (their views would be stale). The gateway sets its own.
// A nil r removes the renderer.
func (c *Cache) SetRenderer(r Renderer) {
	if c.hot == nil {
		return
	}
	if r == nil {
		c.hot.render.Store(nil)
	} else {
		c.hot.render.Store(&r)
	}
	c.hot.clear()
}

// HotStats returns the number of entries in the hot tier and their
// accounted bytes (0, 0 when the tier is off).
func (c *Cache) HotStats() (entries int, bytes int64) {
	if c.hot == nil {
		return 0, 0
	}
	return c.hot.stats()
}

// fetch returns the live entry (ns, id) from the hot tier or, promoting it
// there, from the store.
func (c *Cache) fetch(ctx context.Context, ns, id string, now time.Time) (*hotEntry, error) {
	if c.hot != nil {
		if he := c.hot.get(ns, id, now); he != nil {
			return he, nil
		}
	}
	return c.fetchStore(ctx, ns, id)
}

// fetchStore reads (ns, id) from the store and promotes it to the hot tier.
func (c *Cache) fetchStore(ctx context.Context, ns, id string) (*hotEntry, error) {
	e, err := c.store.Get(ctx, ns, id)
	if err != nil {
		return nil, err
	}
	if c.hot != nil {
		return c.hot.put(ns, id, e.Key, e.Response, e.ExpiresAt), nil
	}
	return &hotEntry{key: e.Key, resp: e.Response, expires: e.ExpiresAt}, nil
}

func tenantOf(ns string) string {
	t, _, _ := strings.Cut(ns, "/")
	if u, err := url.PathUnescape(t); err == nil {
		return u
	}
	return t
}

func labelOf(ns string) string {
	i := strings.LastIndexByte(ns, '/')
	if i < 0 {
		return ns
	}
	return ns[:i]
}

// state returns the namespace state, creating it. c.mu must be held.
func (c *Cache) state(ns string) *nsState {
	s := c.ns[ns]
	if s != nil {
		return s
	}
	nc := c.cfg.For(tenantOf(ns))
	p, err := policy.New[string](nc.Policy, policy.Capacity{MaxEntries: nc.MaxEntries, MaxBytes: nc.MaxBytes})
	if err != nil { // Validate checked the name; keep going with LRU.
		p = policy.NewLRU[string](policy.Capacity{MaxEntries: nc.MaxEntries, MaxBytes: nc.MaxBytes})
	}
	s = &nsState{label: labelOf(ns), pol: policy.WithTTL(p, nc.TTL, c.now)}
	c.ns[ns] = s
	if c.agg[s.label] == nil {
		c.agg[s.label] = &aggState{}
	}
	return s
}

// account updates the gauges after a change of s from (n0, b0). c.mu must be held.
func (c *Cache) account(s *nsState, n0 int, b0 int64) {
	a := c.agg[s.label]
	dn, db := int64(s.pol.Len()-n0), s.pol.Bytes()-b0
	if dn == 0 && db == 0 {
		return
	}
	a.entries += dn
	a.bytes += db
	c.m.entries.WithLabelValues(s.label).Set(float64(a.entries))
	c.m.bytes.WithLabelValues(s.label).Set(float64(a.bytes))
}

type victim struct {
	ns, id, reason string
}

// admit records e in the eviction policy and returns the victims to delete.
func (c *Cache) admit(ns, id string, size int64, cost float64, ttl time.Duration) []victim {
	c.mu.Lock()
	s := c.state(ns)
	n0, b0 := s.pol.Len(), s.pol.Bytes()
	ev := s.pol.AddTTL(id, size, cost, ttl)
	c.account(s, n0, b0)
	c.mu.Unlock()
	out := make([]victim, 0, len(ev))
	for _, e := range ev {
		out = append(out, victim{ns, e.Key, e.Reason.String()})
	}
	return out
}

// evict deletes victims from store and index and counts them.
func (c *Cache) evict(ctx context.Context, vs []victim) {
	for _, v := range vs {
		if c.hot != nil {
			c.hot.remove(v.ns, v.id)
		}
		if err := c.store.Delete(ctx, v.ns, v.id); err != nil && !errors.Is(err, ErrNotFound) {
			c.m.errors.WithLabelValues("store-delete").Inc()
			c.logf("cache: evict %s: %v", v.id, err)
		}
		if c.index != nil {
			if err := c.index.Remove(ctx, v.ns, v.id); err != nil && !errors.Is(err, ErrNotFound) {
				c.m.errors.WithLabelValues("index-remove").Inc()
			}
		}
		c.m.evictions.WithLabelValues(v.reason).Inc()
	}
}

// forget drops id from the policy (entry found stale or removed) and counts
// it, as "ttl" when its deadline has passed.
func (c *Cache) forget(ctx context.Context, ns, id, reason string) {
	c.mu.Lock()
	if s := c.ns[ns]; s != nil {
		if at, ok := s.pol.Deadline(id); ok && !c.now().Before(at) {
			reason = "ttl"
		}
		n0, b0 := s.pol.Len(), s.pol.Bytes()
		s.pol.Remove(id)
		c.account(s, n0, b0)
	}
	c.mu.Unlock()
	c.evict(ctx, []victim{{ns, id, reason}})
}

type rebuilt struct {
	ns, id   string
	size     int64
	cost     float64
	created  time.Time
	expires  time.Time
	hasTTL   bool
	embedKey string
}

func (c *Cache) rebuild(ctx context.Context) error {
	persistent := false
	if p, ok := c.index.(Persistent); ok && p.Persistent() {
		persistent = true
	}
	now := c.now()
	var items []rebuilt
	var stale []victim
	err := c.store.Scan(ctx, "", func(e *Entry) error {
		if !e.ExpiresAt.IsZero() && !now.Before(e.ExpiresAt) {
			stale = append(stale, victim{e.Namespace, e.ID, "ttl"})
			return nil
		}
		it := rebuilt{ns: e.Namespace, id: e.ID, size: e.Size(), cost: e.Cost, created: e.CreatedAt, expires: e.ExpiresAt, hasTTL: !e.ExpiresAt.IsZero()}
		if !c.cfg.DisableSemantic && !persistent {
			if len(e.Vector) == c.emb.Dim() {
				if err := c.index.Add(ctx, e.Namespace, e.ID, e.Vector); err != nil {
					return fmt.Errorf("cache: rebuild index %s: %w", e.ID, err)
				}
			} else {
				it.embedKey = e.Key
			}
		}
		items = append(items, it)
		return nil
	})
	if err != nil {
		return fmt.Errorf("cache: rebuild scan: %w", err)
	}
	// Re-embed entries written with another embedder, in batches.
	var todo []int
	for i := range items {
		if items[i].embedKey != "" {
			todo = append(todo, i)
		}
	}
	for len(todo) > 0 {
		n := min(len(todo), 64)
		texts := make([]string, n)
		for j, i := range todo[:n] {
			texts[j] = items[i].embedKey
		}
		vs, err := c.emb.Embed(ctx, texts)
		if err != nil {
			return fmt.Errorf("cache: rebuild embed: %w", err)
		}
		for j, i := range todo[:n] {
			if err := c.index.Add(ctx, items[i].ns, items[i].id, vs[j]); err != nil {
				return fmt.Errorf("cache: rebuild index %s: %w", items[i].id, err)
			}
		}
		todo = todo[n:]
	}
	sort.SliceStable(items, func(a, b int) bool { return items[a].created.Before(items[b].created) })
	var vs []victim
	for _, it := range items {
		ttl := time.Duration(0)
		if it.hasTTL {
			ttl = it.expires.Sub(now)
		}
		vs = append(vs, c.admit(it.ns, it.id, it.size, it.cost, ttl)...)
	}
	c.evict(ctx, append(stale, vs...))
	return nil
}

// prepared is a request after pre-processing.
type prepared struct {
	ns, label, norm, id string
	cfg                 NamespaceConfig
	bypass              string // non-empty: not cacheable, and why
}

func (c *Cache) prepare(req *Request) prepared {
	ns := Namespace(req)
	p := prepared{ns: ns, label: labelOf(ns), cfg: c.cfg.For(req.Tenant)}
	raw := KeyText(req, c.cfg.KeyMode)
	switch {
	case req.Temperature > 0 && !p.cfg.AllowTemperature:
		p.bypass = "temperature"
	case strings.TrimSpace(raw) == "":
		p.bypass = "empty"
	case len(raw) > c.cfg.MaxKeyBytes:
		p.bypass = "too-large"
	}
	if p.bypass == "" {
		p.norm = Normalize(raw, c.cfg.CaseFold)
		p.id = EntryID(ns, p.norm)
	}
	return p
}

func (c *Cache) semanticOn(p prepared) bool {
	return !c.cfg.DisableSemantic && p.cfg.Threshold <= 1
}

// Get looks req up: exact tier, then semantic tier. On error the returned
// Lookup is still a valid miss, so callers may log and continue.
func (c *Cache) Get(ctx context.Context, req *Request) (Lookup, error) {
	l, _, err := c.get(ctx, req)
	return l, err
}

// get also returns the query vector (nil if not computed) for reuse by Put.
func (c *Cache) get(ctx context.Context, req *Request) (Lookup, []float32, error) {
	start := c.now()
	p := c.prepare(req)
	l := Lookup{Namespace: p.ns, ID: p.id}
	if req.NoCache && p.bypass == "" {
		p.bypass = "no-cache"
	}
	if p.bypass != "" {
		l.Reason = p.bypass
		c.m.lookups.WithLabelValues("none", p.label, "bypass").Inc()
		return l, nil, nil
	}
	done := func(l Lookup) Lookup {
		res := "miss"
		if l.Hit {
			res = "hit-semantic"
			if l.Tier == TierExact {
				res = "hit-exact"
			}
			c.m.lookups.WithLabelValues(l.Tier, p.label, "hit").Inc()
		} else {
			c.m.lookups.WithLabelValues("none", p.label, "miss").Inc()
		}
		c.m.latency.WithLabelValues(res).Observe(c.now().Sub(start).Seconds())
		return l
	}
	// Exact tier: the hot tier, then the store (not for ids the eviction
	// state does not know when the store has no other writer).
	e, err := c.fetchExact(ctx, p.ns, p.id, start)
	switch {
	case err == nil && e.key == p.norm:
		c.served(p.ns, p.id)
		l.Hit, l.Tier, l.Similarity, l.Response, l.View = true, TierExact, 1, e.resp, e.view
		return done(l), nil, nil
	case err != nil && !errors.Is(err, ErrNotFound):
		c.m.errors.WithLabelValues("store-get").Inc()
		l.Reason = "error"
		return done(l), nil, fmt.Errorf("cache: exact lookup: %w", err)
	}
	if !c.semanticOn(p) {
		l.Reason = "miss"
		return done(l), nil, nil
	}
	// Semantic tier.
	v, qt, err := c.embedQuery(ctx, p.norm)
	if err != nil {
		c.m.errors.WithLabelValues("embed").Inc()
		l.Reason = "error"
		return done(l), nil, fmt.Errorf("cache: embed %s: %w", c.emb.Name(), err)
	}
	ms, err := c.index.Search(ctx, p.ns, v, c.cfg.TopK)
	if err != nil {
		c.m.errors.WithLabelValues("index-search").Inc()
		l.Reason = "error"
		return done(l), v, fmt.Errorf("cache: vector search: %w", err)
	}
	l.Reason = "miss"
	if len(ms) > 0 {
		l.Similarity = ms[0].Score
	}
	for _, m := range ms {
		if m.Score < p.cfg.Threshold {
			if l.Reason == "miss" {
				l.Reason = "threshold"
				c.m.similarity.WithLabelValues("threshold").Observe(float64(m.Score))
			}
			break
		}
		e, err := c.fetch(ctx, p.ns, m.ID, start)
		if errors.Is(err, ErrNotFound) {
			c.forget(ctx, p.ns, m.ID, "stale")
			continue
		}
		if err != nil {
			c.m.errors.WithLabelValues("store-get").Inc()
			l.Reason = "error"
			return done(l), v, fmt.Errorf("cache: semantic fetch: %w", err)
		}
		if !c.cfg.DisableGuard {
			if qt == nil { // the query's tokens for the guard, made once
				qt = tokenize(p.norm)
			}
			if why := guardTokens(qt, e.tokens()); why != "" {
				c.m.guard.WithLabelValues(why).Inc()
				c.m.similarity.WithLabelValues("guard").Observe(float64(m.Score))
				if l.Reason == "miss" || l.Reason == "threshold" {
					l.Reason = why
				}
				continue
			}
		}
		c.m.similarity.WithLabelValues("served").Observe(float64(m.Score))
		c.served(p.ns, m.ID)
		l.Hit, l.Tier, l.Similarity, l.Response, l.View, l.ID, l.Reason = true, TierSemantic, m.Score, e.resp, e.view, m.ID, ""
		return done(l), v, nil
	}
	return done(l), v, nil
}

// embedQuery embeds a lookup's normalized key. The built-in lexical
// embedder embeds the key's tokens, which are returned for the guard (one
// tokenization per lookup); other embedders return nil tokens.
func (c *Cache) embedQuery(ctx context.Context, norm string) ([]float32, []token, error) {
	if lx, ok := c.emb.(*Lexical); ok {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		ts := tokenize(norm)
		return lx.embedTokens(ts), ts, nil
	}
	vs, err := c.emb.Embed(ctx, []string{norm})
	if err != nil || len(vs) != 1 {
		return nil, nil, errOr(err, len(vs))
	}
	return vs[0], nil, nil
}

func errOr(err error, n int) error {
	if err != nil {
		return err
	}
	return fmt.Errorf("%w: embedder returned %d vectors for 1 text", ErrDim, n)
}

// served records a hit in the policy and counts it for the store (written
// in batches by the toucher).
func (c *Cache) served(ns, id string) {
	c.mu.Lock()
	if s := c.ns[ns]; s != nil {
		s.pol.Get(id)
	}
	if len(c.hits) < maxPendingHits { // hit statistics are best effort
		c.hits[hotKey{ns, id}]++
	}
	c.mu.Unlock()
}

func (c *Cache) janitor() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			c.Sweep(context.Background())
		case <-c.stop:
			return
		}
	}
}

// Sweep removes expired entries now (the janitor calls it every
// SweepInterval). It returns how many were removed.
func (c *Cache) Sweep(ctx context.Context) int {
	var vs []victim
	c.mu.Lock()
	for ns, s := range c.ns {
		n0, b0 := s.pol.Len(), s.pol.Bytes()
		for _, e := range s.pol.Sweep() {
			vs = append(vs, victim{ns, e.Key, e.Reason.String()})
		}
		c.account(s, n0, b0)
	}
	c.mu.Unlock()
	c.evict(ctx, vs)
	return len(vs)
}

// Put stores response for req unless req is not cacheable (NoStore,
// temperature, empty or oversized key, oversized response). It copies
// response. cost is the price of regenerating it (e.g. completion tokens).
func (c *Cache) Put(ctx context.Context, req *Request, response []byte, cost float64) error {
	return c.put(ctx, req, c.prepare(req), nil, response, cost)
}

func (c *Cache) put(ctx context.Context, req *Request, p prepared, v []float32, response []byte, cost float64) error {
	if req.NoStore || p.bypass != "" || len(response) > c.cfg.MaxResponseBytes {
		return nil
	}
	if v == nil && c.semanticOn(p) {
		vs, err := c.emb.Embed(ctx, []string{p.norm})
		if err != nil || len(vs) != 1 {
			c.m.errors.WithLabelValues("embed").Inc()
			return fmt.Errorf("cache: embed %s: %w", c.emb.Name(), errOr(err, len(vs)))
		}
		v = vs[0]
	}
	now := c.now()
	e := &Entry{
		ID: p.id, Namespace: p.ns, Key: p.norm,
		Response: append([]byte(nil), response...),
		Vector:   v, Cost: cost, CreatedAt: now,
	}
	if p.cfg.TTL > 0 {
		e.ExpiresAt = now.Add(p.cfg.TTL)
	}
	if err := c.store.Put(ctx, e); err != nil {
		c.m.errors.WithLabelValues("store-put").Inc()
		return fmt.Errorf("cache: store put: %w", err)
	}
	if v != nil {
		if err := c.index.Add(ctx, p.ns, p.id, v); err != nil {
			c.m.errors.WithLabelValues("index-add").Inc()
			if c.hot != nil {
				c.hot.remove(p.ns, p.id)
			}
			_ = c.store.Delete(ctx, p.ns, p.id)
			return fmt.Errorf("cache: index add: %w", err)
		}
	}
	if c.hot != nil {
		// Write-through: the next hit on this entry reads no store.
		c.hot.put(p.ns, p.id, p.norm, e.Response, e.ExpiresAt)
	}
	c.m.stores.WithLabelValues(p.label).Inc()
	c.evict(ctx, c.admit(p.ns, p.id, e.Size(), cost, p.cfg.TTL))
	return nil
}

// Generator produces a response on a miss, with its regeneration cost.
type Generator func(ctx context.Context) (response []byte, cost float64, err error)

type flight struct {
	resp []byte
}

// Do serves req from the cache or, on a miss, runs gen once per identical
// concurrent request (same namespace and normalized key), stores the result
// (unless NoStore) and returns it. Followers that joined another caller's
// generation get Lookup.Shared set and their own copy of the response; a
// follower shares the leader's fate, including its context's cancellation.
// Requests that are not cacheable (NoCache, temperature, empty key) run gen
// directly.
func (c *Cache) Do(ctx context.Context, req *Request, gen Generator) (Lookup, []byte, error) {
	l, v, err := c.get(ctx, req)
	if err != nil {
		c.logf("cache: lookup: %v", err)
	}
	if l.Hit {
		return l, l.Response, nil
	}
	p := c.prepare(req)
	// no-cache and no-store requests are never coalesced with others: the
	// client asked for an answer of its own.
	if req.NoCache || req.NoStore || p.bypass != "" {
		resp, cost, err := gen(ctx)
		if err != nil {
			return l, nil, err
		}
		if perr := c.put(ctx, req, p, v, resp, cost); perr != nil {
			c.logf("cache: store: %v", perr)
		}
		return l, resp, nil
	}
	leader := false
	r, err, shared := c.sf.Do(p.ns+"\x00"+p.id, func() (any, error) {
		leader = true
		c.m.generates.WithLabelValues(p.label, "false").Inc()
		resp, cost, err := gen(ctx)
		if err != nil {
			return nil, err
		}
		if perr := c.put(ctx, req, p, v, resp, cost); perr != nil {
			c.logf("cache: store: %v", perr)
		}
		return flight{resp: resp}, nil
	})
	if !leader {
		c.m.generates.WithLabelValues(p.label, "true").Inc()
		l.Shared = true
	}
	if err != nil {
		return l, nil, err
	}
	resp := r.(flight).resp
	if shared && !leader {
		resp = append([]byte(nil), resp...)
	}
	return l, resp, nil
}

// NamespaceStats is the eviction state of one namespace.
type NamespaceStats struct {
	Namespace string
	Entries   int
	Bytes     int64
}

// Stats returns the per-namespace entry counts and bytes, sorted by namespace.
func (c *Cache) Stats() []NamespaceStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]NamespaceStats, 0, len(c.ns))
	for ns, s := range c.ns {
		out = append(out, NamespaceStats{ns, s.pol.Len(), s.pol.Bytes()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Namespace < out[j].Namespace })
	return out
}

// Len is the total number of entries tracked by the eviction policies.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, s := range c.ns {
		n += s.pol.Len()
	}
	return n
}

func knownPolicy(name string) bool {
	for _, n := range policy.Names() {
		if n == name {
			return true
		}
	}
	return false
}
