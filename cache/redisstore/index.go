package redisstore

import (
	"container/list"
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/specgate/specgate/cache"

	"github.com/specgate/specgate/vecmath"
)

// Index is a cache.VectorIndex on plain Redis, without RediSearch (Debian's
// Redis 7.0 has no vector search).
//
// # How it works, and the trade-off
//
// Redis holds the vectors of each namespace in one hash (id → float32s) and
// a change log: every Add/Remove increments the namespace's version and
// records (id, version) in a sorted set. Each process keeps an in-process
// copy of the vectors of the namespaces it searched recently and, on every
// Search, asks Redis for the version (one round trip); when it moved, it
// fetches only the ids changed since its copy's version (one more round
// trip) and their current vectors, then searches exactly by brute force.
//
// So all replicas share one index and see each other's writes on their next
// Search, at the cost of (a) one Redis round trip per Search, (b) O(n·dim)
// CPU per Search (exact, recall 1, fine to ~10⁵ vectors per namespace), and
// (c) memory for n·dim float32s per cached namespace in every replica
// (MaxNamespaces bounds how many are cached). Removed ids leave tombstones
// in the change log; when they outnumber the live vectors (plus 1024) the
// Remove that notices prunes them and raises the namespace's low-water mark,
// and a replica whose copy is older than that mark reloads the namespace in
// full (HSCAN in batches). For millions of vectors per namespace use Milvus
// (cache/milvusstore) instead.
type Index struct {
	rdb    redis.UniversalClient
	ks     keyspace
	opt    IndexOptions
	closed atomic.Bool

	mu    sync.Mutex
	dim   int // fixed by IndexOptions.Dim or the first Add/Search
	nss   map[string]*list.Element
	order *list.List // of *nsCopy, most recently used first
}

var _ cache.VectorIndex = (*Index)(nil)

// IndexOptions configures an Index.
type IndexOptions struct {
	// Prefix starts every key; DefaultPrefix when empty.
	Prefix string
	// Dim is the vector dimension; 0 = fixed by the first Add or Search.
	Dim int
	// MaxNamespaces bounds the namespaces whose vectors are cached in process; 256 when 0.
	MaxNamespaces int
	// MaxVectors bounds the vectors of one namespace loaded into memory
	// (untrusted size guard); 1<<21 when 0.
	MaxVectors int
	// OwnClient makes Close close the client too.
	OwnClient bool
}

// nsCopy is the in-process copy of one namespace's vectors.
// vecs is row-major [len(ids), dim]; row i belongs to ids[i].
type nsCopy struct {
	name string
	mu   sync.RWMutex
	ver  int64 // -1 = never loaded
	ids  []string
	pos  map[string]int
	vecs []float32
}

// NewIndex returns an Index on rdb. The caller keeps ownership of rdb unless
// opt.OwnClient is set.
func NewIndex(rdb redis.UniversalClient, opt IndexOptions) (*Index, error) {
	if rdb == nil {
		return nil, fmt.Errorf("%w: nil redis client", ErrInvalid)
	}
	o := Options{Prefix: opt.Prefix}
	if err := o.fill(); err != nil {
		return nil, err
	}
	opt.Prefix = o.Prefix
	if opt.Dim < 0 {
		return nil, fmt.Errorf("%w: IndexOptions.Dim %d < 0", ErrInvalid, opt.Dim)
	}
	if opt.MaxNamespaces <= 0 {
		opt.MaxNamespaces = 256
	}
	if opt.MaxVectors <= 0 {
		opt.MaxVectors = 1 << 21
	}
	return &Index{rdb: rdb, ks: keyspace{opt.Prefix}, opt: opt, dim: opt.Dim,
		nss: map[string]*list.Element{}, order: list.New()}, nil
}

// DialIndex connects to url (see Dial) and returns an Index owning the client.
func DialIndex(ctx context.Context, url string, opt IndexOptions) (*Index, error) {
	rdb, err := dialClient(ctx, url)
	if err != nil {
		return nil, err
	}
	opt.OwnClient = true
	ix, err := NewIndex(rdb, opt)
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	return ix, nil
}

// Close marks the index closed and closes the client when it owns it.
func (x *Index) Close() error {
	if x.closed.Swap(true) {
		return nil
	}
	x.mu.Lock()
	x.nss, x.order = map[string]*list.Element{}, list.New()
	x.mu.Unlock()
	if x.opt.OwnClient {
		return x.rdb.Close()
	}
	return nil
}

// checkDim fixes the dimension on first use and checks v against it.
func (x *Index) checkDim(v []float32) error {
	if x.closed.Load() {
		return cache.ErrClosed
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(v) == 0 {
		return fmt.Errorf("%w: empty vector", cache.ErrDim)
	}
	if x.dim == 0 {
		x.dim = len(v)
	}
	if len(v) != x.dim {
		return fmt.Errorf("%w: vector has %d floats, index has %d", cache.ErrDim, len(v), x.dim)
	}
	return nil
}

// addScript: KEYS vec, vlog, vver; ARGV id, bytes.
var addScript = redis.NewScript(`
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
local v = redis.call('INCR', KEYS[3])
redis.call('ZADD', KEYS[2], v, ARGV[1])
return v
`)

// removeScript: KEYS vec, vlog, vver, vmin; ARGV id.
// Prunes tombstones when they outnumber live vectors by more than 1024.
var removeScript = redis.NewScript(`
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then return 0 end
local v = redis.call('INCR', KEYS[3])
redis.call('ZADD', KEYS[2], v, ARGV[1])
local live = redis.call('HLEN', KEYS[1])
if redis.call('ZCARD', KEYS[2]) > 2 * live + 1024 then
  local all = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
  local maxpruned = tonumber(redis.call('GET', KEYS[4]) or '0')
  for i = 1, #all, 2 do
    if redis.call('HEXISTS', KEYS[1], all[i]) == 0 then
      redis.call('ZREM', KEYS[2], all[i])
      local s = tonumber(all[i+1])
      if s > maxpruned then maxpruned = s end
    end
  end
  redis.call('SET', KEYS[4], maxpruned)
end
return v
`)

// Add stores v (copied) under id in namespace, replacing any previous vector.
func (x *Index) Add(ctx context.Context, namespace, id string, v []float32) error {
	if id == "" {
		return fmt.Errorf("%w: Add: empty id", ErrInvalid)
	}
	if err := x.checkDim(v); err != nil {
		return err
	}
	keys := []string{x.ks.vec(namespace), x.ks.vlog(namespace), x.ks.vver(namespace)}
	if err := addScript.Run(ctx, x.rdb, keys, id, encodeVector(v)).Err(); err != nil {
		return fmt.Errorf("redisstore: Index.Add %q: %w", id, err)
	}
	return nil
}

// Remove deletes id from namespace; removing an absent id is not an error.
func (x *Index) Remove(ctx context.Context, namespace, id string) error {
	if x.closed.Load() {
		return cache.ErrClosed
	}
	keys := []string{x.ks.vec(namespace), x.ks.vlog(namespace), x.ks.vver(namespace), x.ks.vmin(namespace)}
	if err := removeScript.Run(ctx, x.rdb, keys, id).Err(); err != nil {
		return fmt.Errorf("redisstore: Index.Remove %q: %w", id, err)
	}
	return nil
}

// Search returns up to k matches of namespace, best (highest cosine) first,
// ties broken by id. v need not be normalized; stored vectors are compared
// by cosine similarity. The result is owned by the caller.
func (x *Index) Search(ctx context.Context, namespace string, v []float32, k int) ([]cache.Match, error) {
	if err := x.checkDim(v); err != nil {
		return nil, err
	}
	if k <= 0 {
		return nil, nil
	}
	c := x.copyOf(namespace)
	if err := x.sync(ctx, c); err != nil {
		return nil, err
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	return topK(c.ids, c.vecs, x.dim, v, k), nil
}

// copyOf returns the namespace's in-process copy, creating it and evicting
// the least recently searched copy beyond MaxNamespaces.
func (x *Index) copyOf(namespace string) *nsCopy {
	x.mu.Lock()
	defer x.mu.Unlock()
	if el, ok := x.nss[namespace]; ok {
		x.order.MoveToFront(el)
		return el.Value.(*nsCopy)
	}
	c := &nsCopy{name: namespace, ver: -1, pos: map[string]int{}}
	x.nss[namespace] = x.order.PushFront(c)
	for x.order.Len() > x.opt.MaxNamespaces {
		old := x.order.Back()
		x.order.Remove(old)
		delete(x.nss, old.Value.(*nsCopy).name)
	}
	return c
}

// sync brings c up to the namespace's version in Redis. The common case (no
// change since the last search) costs one GET and no exclusive lock, so
// concurrent searches of one namespace do not serialize.
func (x *Index) sync(ctx context.Context, c *nsCopy) error {
	cur, err := x.rdb.Get(ctx, x.ks.vver(c.name)).Result()
	if err != nil && err != redis.Nil {
		return fmt.Errorf("redisstore: Index.Search version: %w", err)
	}
	c.mu.RLock()
	fresh := c.ver >= 0 && ((err == redis.Nil && c.ver == 0) || (err == nil && strconv.FormatInt(c.ver, 10) == cur))
	c.mu.RUnlock()
	if fresh {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ns := c.name
	var verCmd, minCmd *redis.StringCmd
	var logCmd *redis.ZSliceCmd
	_, err = x.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		verCmd = p.Get(ctx, x.ks.vver(ns))
		minCmd = p.Get(ctx, x.ks.vmin(ns))
		if c.ver >= 0 {
			logCmd = p.ZRangeByScoreWithScores(ctx, x.ks.vlog(ns), &redis.ZRangeBy{
				Min: "(" + strconv.FormatInt(c.ver, 10), Max: "+inf"})
		}
		return nil
	})
	if err != nil && err != redis.Nil {
		return fmt.Errorf("redisstore: Index.Search sync: %w", err)
	}
	ver, err := intOrZero(verCmd)
	if err != nil {
		return err
	}
	vmin, err := intOrZero(minCmd)
	if err != nil {
		return err
	}
	if ver == c.ver {
		return nil
	}
	if c.ver < 0 || c.ver < vmin || ver < c.ver { // first use, pruned tombstones, or keys were reset
		return x.reload(ctx, c, ver)
	}
	changed := logCmd.Val()
	if len(changed) == 0 {
		c.ver = ver
		return nil
	}
	ids := make([]string, len(changed))
	for i, z := range changed {
		ids[i] = z.Member.(string)
	}
	vals, err := x.rdb.HMGet(ctx, x.ks.vec(ns), ids...).Result()
	if err != nil {
		return fmt.Errorf("redisstore: Index.Search fetch: %w", err)
	}
	for i, id := range ids {
		if vals[i] == nil {
			c.remove(id)
			continue
		}
		vec, err := x.decode(id, vals[i].(string))
		if err != nil {
			return err
		}
		if err := c.put(id, vec, x.dim, x.opt.MaxVectors); err != nil {
			return err
		}
	}
	// Changes made after we read ver have scores > ver and are fetched again
	// next time; re-applying them is idempotent (HMGET returns current state).
	c.ver = ver
	return nil
}

func intOrZero(c *redis.StringCmd) (int64, error) {
	s, err := c.Result()
	if err == redis.Nil {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("redisstore: Index version: %w", err)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: index version %q: %v", ErrCorrupt, s, err)
	}
	return n, nil
}

// reload replaces c with the namespace's full vector hash, read by HSCAN.
// ver was read before the scan, so later changes are picked up by the log.
func (x *Index) reload(ctx context.Context, c *nsCopy, ver int64) error {
	c.ids, c.vecs, c.pos = c.ids[:0], c.vecs[:0], map[string]int{}
	var cursor uint64
	for {
		kv, next, err := x.rdb.HScan(ctx, x.ks.vec(c.name), cursor, "", 512).Result()
		if err != nil {
			c.ver = -1
			return fmt.Errorf("redisstore: Index reload: %w", err)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			vec, err := x.decode(kv[i], kv[i+1])
			if err != nil {
				c.ver = -1
				return err
			}
			if err := c.put(kv[i], vec, x.dim, x.opt.MaxVectors); err != nil {
				c.ver = -1
				return err
			}
		}
		if next == 0 {
			break
		}
		cursor = next
	}
	c.ver = ver
	return nil
}

func (x *Index) decode(id, s string) ([]float32, error) {
	vec, err := decodeVector(s)
	if err != nil {
		return nil, fmt.Errorf("redisstore: vector %q: %w", id, err)
	}
	if len(vec) != x.dim {
		return nil, fmt.Errorf("%w: stored vector %q has %d floats, index has %d", cache.ErrDim, id, len(vec), x.dim)
	}
	return vec, nil
}

// put inserts or replaces id's row (normalized copy of vec).
func (c *nsCopy) put(id string, vec []float32, dim, max int) error {
	vecmath.Normalize(vec)
	if i, ok := c.pos[id]; ok {
		copy(c.vecs[i*dim:(i+1)*dim], vec)
		return nil
	}
	if len(c.ids) >= max {
		return fmt.Errorf("%w: namespace holds more than IndexOptions.MaxVectors=%d vectors", ErrTooLarge, max)
	}
	c.pos[id] = len(c.ids)
	c.ids = append(c.ids, id)
	c.vecs = append(c.vecs, vec...)
	return nil
}

// remove deletes id's row by moving the last row into its place.
func (c *nsCopy) remove(id string) {
	i, ok := c.pos[id]
	if !ok {
		return
	}
	dim := len(c.vecs) / len(c.ids)
	last := len(c.ids) - 1
	if i != last {
		c.ids[i] = c.ids[last]
		c.pos[c.ids[i]] = i
		copy(c.vecs[i*dim:(i+1)*dim], c.vecs[last*dim:])
	}
	c.ids = c.ids[:last]
	c.vecs = c.vecs[:last*dim]
	delete(c.pos, id)
}

// topK is an exact search over row-major vecs [len(ids), dim] (rows
// normalized): cosine of q against every row, best k first, ties by id.
func topK(ids []string, vecs []float32, dim int, q []float32, k int) []cache.Match {
	qn := make([]float32, len(q))
	copy(qn, q)
	vecmath.Normalize(qn)
	out := make([]cache.Match, 0, min(k, len(ids))+1)
	less := func(a, b cache.Match) bool { // a ranks before b
		if a.Score != b.Score {
			return a.Score > b.Score
		}
		return a.ID < b.ID
	}
	for i, id := range ids {
		m := cache.Match{ID: id, Score: vecmath.Dot(vecs[i*dim:(i+1)*dim], qn)}
		if len(out) == k && !less(m, out[k-1]) {
			continue
		}
		// insertion into the sorted top-k list
		j := sort.Search(len(out), func(j int) bool { return less(m, out[j]) })
		out = append(out, cache.Match{})
		copy(out[j+1:], out[j:])
		out[j] = m
		if len(out) > k {
			out = out[:k]
		}
	}
	return out
}
