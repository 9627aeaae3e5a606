package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/specgate/specgate/cache"
)

// A hung Redis (SIGSTOP, a stalled network, a full client pool) must cost a
// request milliseconds, not seconds: the cache is an accelerator, and a
// request that misses it is still served. The Breaker bounds every call to
// Redis by a short timeout and, after a run of failures, stops calling it
// at all (fails open: the cache reports a miss and skips its writes) until a
// probe call succeeds again.

// ErrOpen is returned without calling Redis while the breaker is open. It
// has a method CacheUnavailable() bool (true), so that callers that log
// cache errors can tell it apart without importing this package: the
// breaker logs its own opening and closing once, where a per-request line
// would repeat it for every request.
var ErrOpen error = openError{}

type openError struct{}

func (openError) Error() string          { return "redisstore: circuit open, redis unavailable" }
func (openError) CacheUnavailable() bool { return true }

// IsUnavailable reports whether err says the cache is skipped on purpose
// (an open breaker): an error that has CacheUnavailable() bool returning true.
func IsUnavailable(err error) bool {
	var u interface{ CacheUnavailable() bool }
	return errors.As(err, &u) && u.CacheUnavailable()
}

// Default guard settings.
const (
	DefaultReadTimeout  = 50 * time.Millisecond
	DefaultWriteTimeout = 250 * time.Millisecond
	DefaultScanTimeout  = 5 * time.Minute
	DefaultFailures     = 3
	DefaultCooldown     = time.Second
)

// GuardOptions configures a Breaker; zero fields take the defaults above.
type GuardOptions struct {
	ReadTimeout  time.Duration // bounds Get and Search
	WriteTimeout time.Duration // bounds Put, Delete, Touch, Add and Remove
	ScanTimeout  time.Duration // bounds Scan (start-up rebuild)
	Failures     int           // consecutive failures that open the breaker
	Cooldown     time.Duration // how long it stays open before one probe call
	Now          func() time.Time
	// OnChange, when set, is called (outside the lock) when the breaker
	// opens (true) or closes again (false).
	OnChange func(open bool)
}

func (o *GuardOptions) fill() {
	if o.ReadTimeout <= 0 {
		o.ReadTimeout = DefaultReadTimeout
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.ScanTimeout <= 0 {
		o.ScanTimeout = DefaultScanTimeout
	}
	if o.Failures <= 0 {
		o.Failures = DefaultFailures
	}
	if o.Cooldown <= 0 {
		o.Cooldown = DefaultCooldown
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Breaker is a circuit breaker with per-call timeouts for the calls of a
// Store and an Index on one Redis (wrap both with the same Breaker). Closed,
// every call runs under its timeout; Failures consecutive failures (errors
// other than not-found and invalid arguments, timeouts included) open it:
// calls then return ErrOpen at once. After Cooldown one call is let through
// as a probe; its success closes the breaker, its failure opens it for
// another Cooldown. Safe for concurrent use.
type Breaker struct {
	opt GuardOptions

	mu        sync.Mutex
	failures  int
	open      bool
	openUntil time.Time
	probing   bool
}

// NewBreaker returns a closed breaker.
func NewBreaker(opt GuardOptions) *Breaker {
	opt.fill()
	return &Breaker{opt: opt}
}

// Open reports whether the breaker is open (calls are refused).
func (b *Breaker) Open() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.open
}

// allow says whether a call may go to Redis, and whether it is the probe.
func (b *Breaker) allow() (ok, probe bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open {
		return true, false
	}
	if b.probing || b.opt.Now().Before(b.openUntil) {
		return false, false
	}
	b.probing = true
	return true, true
}

// countsAsFailure: errors that say nothing about Redis's health do not.
func countsAsFailure(err error) bool {
	return err != nil && !errors.Is(err, cache.ErrNotFound) && !errors.Is(err, cache.ErrDim) &&
		!errors.Is(err, ErrInvalid) && !errors.Is(err, ErrTooLarge) && !errors.Is(err, ErrCorrupt) &&
		!errors.Is(err, cache.ErrClosed)
}

func (b *Breaker) record(err error, probe bool) {
	var changed, nowOpen bool
	b.mu.Lock()
	if probe {
		b.probing = false
	}
	if !countsAsFailure(err) {
		b.failures = 0
		if b.open {
			b.open, changed = false, true
		}
	} else {
		b.failures++
		if probe || (!b.open && b.failures >= b.opt.Failures) {
			if !b.open {
				changed = true
			}
			b.open, nowOpen = true, true
			b.openUntil = b.opt.Now().Add(b.opt.Cooldown)
		}
	}
	b.mu.Unlock()
	if changed && b.opt.OnChange != nil {
		b.opt.OnChange(nowOpen)
	}
}

// do runs fn under timeout unless the breaker is open.
func (b *Breaker) do(ctx context.Context, timeout time.Duration, fn func(ctx context.Context) error) error {
	ok, probe := b.allow()
	if !ok {
		return ErrOpen
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	err := fn(cctx)
	cancel()
	if err != nil && ctx.Err() != nil {
		// The caller gave up: no news about Redis.
		if probe {
			b.mu.Lock()
			b.probing = false
			b.mu.Unlock()
		}
		return err
	}
	if err != nil && cctx.Err() != nil && !errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("%w (%w after %s)", err, context.DeadlineExceeded, timeout)
	}
	b.record(err, probe)
	return err
}

// Store wraps s: every call is bounded and goes through the breaker.
func (b *Breaker) Store(s cache.Store) cache.Store { return &guardedStore{b: b, s: s} }

// Index wraps ix: every call is bounded and goes through the breaker.
func (b *Breaker) Index(ix cache.VectorIndex) cache.VectorIndex {
	return &guardedIndex{b: b, ix: ix}
}

type guardedStore struct {
	b *Breaker
	s cache.Store
}

func (g *guardedStore) Put(ctx context.Context, e *cache.Entry) error {
	return g.b.do(ctx, g.b.opt.WriteTimeout, func(ctx context.Context) error { return g.s.Put(ctx, e) })
}

func (g *guardedStore) Get(ctx context.Context, namespace, id string) (*cache.Entry, error) {
	var e *cache.Entry
	err := g.b.do(ctx, g.b.opt.ReadTimeout, func(ctx context.Context) error {
		var err error
		e, err = g.s.Get(ctx, namespace, id)
		return err
	})
	return e, err
}

func (g *guardedStore) Delete(ctx context.Context, namespace, id string) error {
	return g.b.do(ctx, g.b.opt.WriteTimeout, func(ctx context.Context) error { return g.s.Delete(ctx, namespace, id) })
}

func (g *guardedStore) Touch(ctx context.Context, namespace, id string) error {
	return g.b.do(ctx, g.b.opt.WriteTimeout, func(ctx context.Context) error { return g.s.Touch(ctx, namespace, id) })
}

func (g *guardedStore) Scan(ctx context.Context, namespace string, fn func(*cache.Entry) error) error {
	return g.b.do(ctx, g.b.opt.ScanTimeout, func(ctx context.Context) error { return g.s.Scan(ctx, namespace, fn) })
}

func (g *guardedStore) Close() error { return g.s.Close() }

type guardedIndex struct {
	b  *Breaker
	ix cache.VectorIndex
}

func (g *guardedIndex) Add(ctx context.Context, namespace, id string, v []float32) error {
	return g.b.do(ctx, g.b.opt.WriteTimeout, func(ctx context.Context) error { return g.ix.Add(ctx, namespace, id, v) })
}

func (g *guardedIndex) Remove(ctx context.Context, namespace, id string) error {
	return g.b.do(ctx, g.b.opt.WriteTimeout, func(ctx context.Context) error { return g.ix.Remove(ctx, namespace, id) })
}

func (g *guardedIndex) Search(ctx context.Context, namespace string, v []float32, k int) ([]cache.Match, error) {
	var ms []cache.Match
	err := g.b.do(ctx, g.b.opt.ReadTimeout, func(ctx context.Context) error {
		var err error
		ms, err = g.ix.Search(ctx, namespace, v, k)
		return err
	})
	return ms, err
}

func (g *guardedIndex) Close() error { return g.ix.Close() }

// Persistent forwards the wrapped index's cache.Persistent capability.
func (g *guardedIndex) Persistent() bool {
	p, ok := g.ix.(cache.Persistent)
	return ok && p.Persistent()
}

// ClientOptions are go-redis options for a cache client: context deadlines
// bound socket reads and writes (go-redis ignores them otherwise and waits
// ReadTimeout, 3 s by default), a dial timeout and socket timeouts as a
// backstop, and a short wait for a pooled connection.
func ClientOptions(addr, password string, db int) *redis.Options {
	return &redis.Options{
		Addr:                  addr,
		Password:              password,
		DB:                    db,
		ContextTimeoutEnabled: true,
		DialTimeout:           time.Second,
		ReadTimeout:           time.Second,
		WriteTimeout:          time.Second,
		PoolTimeout:           DefaultWriteTimeout,
		MaxRetries:            -1, // a timed-out call is not repeated: the breaker decides
	}
}
