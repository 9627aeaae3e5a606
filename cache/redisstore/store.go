package redisstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/specgate/specgate/cache"
)

// Sentinel errors of this package (cache.ErrNotFound, cache.ErrClosed and
// cache.ErrDim are used where they apply).
var (
	ErrInvalid  = errors.New("redisstore: invalid argument")
	ErrTooLarge = errors.New("redisstore: entry too large")
	ErrCorrupt  = errors.New("redisstore: corrupt stored value")
)

// DefaultMaxEntryBytes bounds Entry.Size() accepted by Put.
const DefaultMaxEntryBytes = 32 << 20

// Options configures a Store.
type Options struct {
	// Prefix starts every key; DefaultPrefix when empty. It may not contain '{' or '}'.
	Prefix string
	// MaxEntryBytes bounds Entry.Size() on Put; DefaultMaxEntryBytes when 0.
	MaxEntryBytes int64
	// ScanCount is the COUNT hint of SCAN; 256 when 0.
	ScanCount int64
	// OwnClient makes Close close the client too.
	OwnClient bool
	// Now overrides the clock (tests); time.Now when nil.
	Now func() time.Time
}

func (o *Options) fill() error {
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	for _, r := range o.Prefix {
		if r == '{' || r == '}' {
			return fmt.Errorf("%w: Options.Prefix %q contains a brace", ErrInvalid, o.Prefix)
		}
	}
	if o.MaxEntryBytes <= 0 {
		o.MaxEntryBytes = DefaultMaxEntryBytes
	}
	if o.ScanCount <= 0 {
		o.ScanCount = 256
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return nil
}

// Store is a cache.Store on Redis. It is safe for concurrent use and for use
// by many processes sharing one Redis.
//
// Expiry is native: an entry with a non-zero ExpiresAt gets PEXPIREAT, so
// Redis drops it even if no replica ever looks at it again; reads also check
// ExpiresAt against the local clock.
type Store struct {
	rdb    redis.UniversalClient
	ks     keyspace
	opt    Options
	closed atomic.Bool
}

var _ cache.Store = (*Store)(nil)

// New returns a Store on rdb. The caller keeps ownership of rdb unless
// opt.OwnClient is set.
func New(rdb redis.UniversalClient, opt Options) (*Store, error) {
	if rdb == nil {
		return nil, fmt.Errorf("%w: nil redis client", ErrInvalid)
	}
	if err := opt.fill(); err != nil {
		return nil, err
	}
	return &Store{rdb: rdb, ks: keyspace{opt.Prefix}, opt: opt}, nil
}

// Dial connects to the Redis named by url ("redis://[user:pass@]host:port/db"
// or "host:port"), checks it with PING and returns a Store owning the client.
func Dial(ctx context.Context, url string, opt Options) (*Store, error) {
	rdb, err := dialClient(ctx, url)
	if err != nil {
		return nil, err
	}
	opt.OwnClient = true
	s, err := New(rdb, opt)
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	return s, nil
}

func dialClient(ctx context.Context, url string) (*redis.Client, error) {
	var ro *redis.Options
	if len(url) > 8 && (url[:8] == "redis://" || (len(url) > 9 && url[:9] == "rediss://")) {
		var err error
		if ro, err = redis.ParseURL(url); err != nil {
			return nil, fmt.Errorf("%w: redis url: %v", ErrInvalid, err)
		}
	} else {
		ro = &redis.Options{Addr: url}
	}
	rdb := redis.NewClient(ro)
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("redisstore: ping %s: %w", ro.Addr, err)
	}
	return rdb, nil
}

// Client returns the underlying client (owned by whoever created it).
func (s *Store) Client() redis.UniversalClient { return s.rdb }

// Close marks the store closed (later calls return cache.ErrClosed) and closes
// the client when the store owns it. Close is idempotent.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	if s.opt.OwnClient {
		return s.rdb.Close()
	}
	return nil
}

func (s *Store) check() error {
	if s.closed.Load() {
		return cache.ErrClosed
	}
	return nil
}

// putScript replaces one entry atomically and keeps the LRU zset.
// KEYS[1] entry hash, KEYS[2] lru zset.
// ARGV[1] expiresAt unix ms (0 = never), ARGV[2] last access unix ms, ARGV[3] id,
// ARGV[4..] field/value pairs.
var putScript = redis.NewScript(`
local exp = tonumber(ARGV[1])
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], unpack(ARGV, 4))
if exp > 0 then redis.call('PEXPIREAT', KEYS[1], exp) end
local existed = redis.call('EXISTS', KEYS[2])
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[3])
if exp == 0 then
  redis.call('PERSIST', KEYS[2])
else
  local t = redis.call('PEXPIRETIME', KEYS[2])
  if existed == 0 or (t >= 0 and t < exp) then redis.call('PEXPIREAT', KEYS[2], exp) end
end
return 1
`)

// touchScript records a hit. KEYS[1] entry, KEYS[2] lru; ARGV[1] now ms, ARGV[2] id, ARGV[3] namespace.
// Returns 0 when the entry is absent or belongs to another namespace.
var touchScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'ns') ~= ARGV[3] then return 0 end
redis.call('HINCRBY', KEYS[1], 'hits', 1)
redis.call('HSET', KEYS[1], 'la', ARGV[1])
redis.call('ZADD', KEYS[2], ARGV[1], ARGV[2])
return 1
`)

// Put stores e (replacing any entry with the same namespace and id). The
// store copies what it needs; the caller keeps ownership of e. An entry whose
// ExpiresAt is already past is deleted instead.
func (s *Store) Put(ctx context.Context, e *cache.Entry) error {
	if err := s.check(); err != nil {
		return err
	}
	if e == nil || e.ID == "" {
		return fmt.Errorf("%w: Put: entry or Entry.ID empty", ErrInvalid)
	}
	if sz := e.Size(); sz > s.opt.MaxEntryBytes {
		return fmt.Errorf("%w: Put %q: %d bytes > MaxEntryBytes %d", ErrTooLarge, e.ID, sz, s.opt.MaxEntryBytes)
	}
	now := s.opt.Now()
	if !e.ExpiresAt.IsZero() && !e.ExpiresAt.After(now) {
		return s.Delete(ctx, e.Namespace, e.ID)
	}
	var exp int64
	if !e.ExpiresAt.IsZero() {
		exp = e.ExpiresAt.UnixMilli()
		if exp <= 0 {
			exp = 1
		}
	}
	args := []any{exp, now.UnixMilli(), e.ID}
	args = append(args, encodeEntry(e, now)...)
	if err := putScript.Run(ctx, s.rdb, []string{s.ks.entry(e.Namespace, e.ID), s.ks.lru(e.Namespace)}, args...).Err(); err != nil {
		return fmt.Errorf("redisstore: Put %q: %w", e.ID, err)
	}
	return nil
}

// Get returns a fresh copy of the entry (owned by the caller), or
// cache.ErrNotFound when it is absent, expired, or in another namespace.
func (s *Store) Get(ctx context.Context, namespace, id string) (*cache.Entry, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	m, err := s.rdb.HGetAll(ctx, s.ks.entry(namespace, id)).Result()
	if err != nil {
		return nil, fmt.Errorf("redisstore: Get %q: %w", id, err)
	}
	if len(m) == 0 {
		return nil, cache.ErrNotFound
	}
	e, err := decodeEntry(m)
	if err != nil {
		return nil, fmt.Errorf("redisstore: Get %q: %w", id, err)
	}
	if e.Namespace != namespace || e.ID != id || s.expired(e) {
		return nil, cache.ErrNotFound
	}
	return e, nil
}

func (s *Store) expired(e *cache.Entry) bool {
	return !e.ExpiresAt.IsZero() && !e.ExpiresAt.After(s.opt.Now())
}

// Delete removes the entry; deleting an absent entry is not an error.
func (s *Store) Delete(ctx context.Context, namespace, id string) error {
	if err := s.check(); err != nil {
		return err
	}
	key := s.ks.entry(namespace, id)
	// The namespace check guards against a (128-bit) hash collision.
	ns, err := s.rdb.HGet(ctx, key, "ns").Result()
	if err == redis.Nil || (err == nil && ns != namespace) {
		return s.rdb.ZRem(ctx, s.ks.lru(namespace), id).Err()
	}
	if err != nil {
		return fmt.Errorf("redisstore: Delete %q: %w", id, err)
	}
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, key)
		p.ZRem(ctx, s.ks.lru(namespace), id)
		return nil
	})
	if err != nil {
		return fmt.Errorf("redisstore: Delete %q: %w", id, err)
	}
	return nil
}

// Touch increments the entry's hit count and sets its last access time;
// cache.ErrNotFound when the entry is absent.
func (s *Store) Touch(ctx context.Context, namespace, id string) error {
	if err := s.check(); err != nil {
		return err
	}
	now := s.opt.Now().UnixMilli()
	n, err := touchScript.Run(ctx, s.rdb, []string{s.ks.entry(namespace, id), s.ks.lru(namespace)}, now, id, namespace).Int()
	if err != nil {
		return fmt.Errorf("redisstore: Touch %q: %w", id, err)
	}
	if n == 0 {
		return cache.ErrNotFound
	}
	return nil
}

// Scan calls fn with a fresh copy of every live entry of namespace ("" = all
// namespaces), walking the keyspace with SCAN MATCH and fetching entries in
// pipelined batches. Entries written during the scan may or may not be seen;
// an entry is never passed twice. An error from fn stops the scan and is
// returned as is.
func (s *Store) Scan(ctx context.Context, namespace string, fn func(*cache.Entry) error) error {
	if err := s.check(); err != nil {
		return err
	}
	all := namespace == ""
	pattern := s.ks.entryPattern(namespace, all)
	seen := map[string]struct{}{} // SCAN may return a key more than once
	var cursor uint64
	for {
		keys, next, err := s.rdb.Scan(ctx, cursor, pattern, s.opt.ScanCount).Result()
		if err != nil {
			return fmt.Errorf("redisstore: Scan: %w", err)
		}
		if len(keys) > 0 {
			cmds, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, k := range keys {
					p.HGetAll(ctx, k)
				}
				return nil
			})
			if err != nil && err != redis.Nil {
				return fmt.Errorf("redisstore: Scan: %w", err)
			}
			for i, c := range cmds {
				m, err := c.(*redis.MapStringStringCmd).Result()
				if err != nil || len(m) == 0 {
					continue // vanished (expired or deleted) between SCAN and HGETALL
				}
				if _, dup := seen[keys[i]]; dup {
					continue
				}
				seen[keys[i]] = struct{}{}
				e, err := decodeEntry(m)
				if err != nil {
					return fmt.Errorf("redisstore: Scan key %q: %w", keys[i], err)
				}
				if (!all && e.Namespace != namespace) || s.expired(e) {
					continue
				}
				if err := fn(e); err != nil {
					return err
				}
			}
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}

// Len returns the number of ids in the namespace's LRU set. It may count
// entries that expired and were not yet pruned by LeastRecent.
func (s *Store) Len(ctx context.Context, namespace string) (int64, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	return s.rdb.ZCard(ctx, s.ks.lru(namespace)).Result()
}

// LeastRecent returns up to n ids of the namespace, least recently used
// (stored or touched) first, for LRU eviction by the caller. Ids whose entries
// have expired are pruned from the bookkeeping and not returned.
func (s *Store) LeastRecent(ctx context.Context, namespace string, n int) ([]string, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, nil
	}
	var out []string
	var start int64
	for len(out) < n {
		ids, err := s.rdb.ZRange(ctx, s.ks.lru(namespace), start, start+int64(n)-1).Result()
		if err != nil {
			return nil, fmt.Errorf("redisstore: LeastRecent: %w", err)
		}
		if len(ids) == 0 {
			break
		}
		cmds, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, id := range ids {
				p.Exists(ctx, s.ks.entry(namespace, id))
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("redisstore: LeastRecent: %w", err)
		}
		var stale []any
		for i, c := range cmds {
			if c.(*redis.IntCmd).Val() == 1 {
				if len(out) < n {
					out = append(out, ids[i])
				}
			} else {
				stale = append(stale, ids[i])
			}
		}
		if len(stale) > 0 {
			if err := s.rdb.ZRem(ctx, s.ks.lru(namespace), stale...).Err(); err != nil {
				return nil, fmt.Errorf("redisstore: LeastRecent prune: %w", err)
			}
		}
		start += int64(len(ids) - len(stale))
	}
	return out, nil
}

// encodeEntry returns the hash field/value pairs of e.
func encodeEntry(e *cache.Entry, now time.Time) []any {
	var ca, ea int64
	if !e.CreatedAt.IsZero() {
		ca = e.CreatedAt.UnixNano()
	}
	if !e.ExpiresAt.IsZero() {
		ea = e.ExpiresAt.UnixNano()
	}
	return []any{
		"ns", e.Namespace,
		"id", e.ID,
		"key", e.Key,
		"resp", e.Response,
		"vec", encodeVector(e.Vector),
		"cost", strconv.FormatFloat(e.Cost, 'g', -1, 64),
		"ca", ca,
		"ea", ea,
		"hits", e.Hits,
		"la", now.UnixMilli(),
	}
}

func decodeEntry(m map[string]string) (*cache.Entry, error) {
	ns, ok1 := m["ns"]
	id, ok2 := m["id"]
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("%w: entry hash lacks field ns or id", ErrCorrupt)
	}
	e := &cache.Entry{ID: id, Namespace: ns, Key: m["key"]}
	if r, ok := m["resp"]; ok && r != "" {
		e.Response = []byte(r)
	}
	v, err := decodeVector(m["vec"])
	if err != nil {
		return nil, fmt.Errorf("entry %q field vec: %w", id, err)
	}
	e.Vector = v
	num := func(field string) (int64, error) {
		s, ok := m[field]
		if !ok || s == "" {
			return 0, nil
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%w: entry %q field %s: %v", ErrCorrupt, id, field, err)
		}
		return n, nil
	}
	if c, ok := m["cost"]; ok && c != "" {
		if e.Cost, err = strconv.ParseFloat(c, 64); err != nil {
			return nil, fmt.Errorf("%w: entry %q field cost: %v", ErrCorrupt, id, err)
		}
	}
	ca, err := num("ca")
	if err != nil {
		return nil, err
	}
	ea, err := num("ea")
	if err != nil {
		return nil, err
	}
	if e.Hits, err = num("hits"); err != nil {
		return nil, err
	}
	if ca != 0 {
		e.CreatedAt = time.Unix(0, ca)
	}
	if ea != 0 {
		e.ExpiresAt = time.Unix(0, ea)
	}
	return e, nil
}

// encodeVector returns v as little-endian float32 bytes ("" for nil).
func encodeVector(v []float32) string {
	if len(v) == 0 {
		return ""
	}
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return string(b)
}

// decodeVector is the inverse of encodeVector; it returns a new slice.
func decodeVector(s string) ([]float32, error) {
	if s == "" {
		return nil, nil
	}
	if len(s)%4 != 0 {
		return nil, fmt.Errorf("%w: vector of %d bytes is not a multiple of 4", ErrCorrupt, len(s))
	}
	v := make([]float32, len(s)/4)
	for i := range v {
		j := 4 * i
		v[i] = math.Float32frombits(uint32(s[j]) | uint32(s[j+1])<<8 | uint32(s[j+2])<<16 | uint32(s[j+3])<<24)
	}
	return v, nil
}
