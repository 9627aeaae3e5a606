package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/specgate/specgate/cache"
	"github.com/specgate/specgate/cache/bert"
	"github.com/specgate/specgate/cache/redisstore"
)

// OpenCache assembles the semantic cache of cfg's `cache:` section: its
// store, vector index and embedder (the embedder is returned too: the
// gateway serves it on /v1/embeddings). Redis calls go through one circuit
// breaker; the func closes everything it opened.
func OpenCache(cfg *Config, reg prometheus.Registerer, log *slog.Logger) (*cache.Cache, cache.Embedder, func(), error) {
	cc := &cfg.Cache
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	fail := func(err error) (*cache.Cache, cache.Embedder, func(), error) {
		closeAll()
		return nil, nil, nil, err
	}
	emb, err := openEmbedder(cc)
	if err != nil {
		return fail(err)
	}
	var rdb *redis.Client
	if cc.Store == "redis" || cc.Index == "redis" {
		rdb = redis.NewClient(redisstore.ClientOptions(cc.Redis.Addr, os.Getenv(cc.Redis.PasswordEnv), cc.Redis.DB))
		closers = append(closers, func() { _ = rdb.Close() })
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := rdb.Ping(ctx).Err()
		cancel()
		if err != nil {
			return fail(fmt.Errorf("cache.redis.addr %s: %w", cc.Redis.Addr, err))
		}
	}
	// Every Redis call is bounded and goes through one circuit breaker, so
	// that a hung Redis costs a request milliseconds (a cache miss).
	breaker := redisstore.NewBreaker(redisstore.GuardOptions{ReadTimeout: cc.Redis.ReadTimeout, WriteTimeout: cc.Redis.WriteTimeout,
		Failures: cc.Redis.BreakerFailures, Cooldown: cc.Redis.BreakerCooldown,
		OnChange: func(open bool) {
			if open {
				log.Warn("redis unavailable: cache circuit breaker open, serving without the cache", "addr", cc.Redis.Addr)
			} else {
				log.Info("redis answers again: cache circuit breaker closed", "addr", cc.Redis.Addr)
			}
		}})
	var store cache.Store
	switch cc.Store {
	case "sqlite":
		path := cc.SQLite.Path
		if path == "" {
			path = filepath.Join(cfg.Server.DataDir, "cache.db")
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return fail(fmt.Errorf("cache.sqlite.path %s: %w", path, err))
		}
		s, err := cache.OpenSQLite(path, nil)
		if err != nil {
			return fail(fmt.Errorf("cache.sqlite.path %s: %w", path, err))
		}
		closers = append(closers, func() { _ = s.Close() })
		store = s
	case "redis":
		s, err := redisstore.New(rdb, redisstore.Options{})
		if err != nil {
			return fail(err)
		}
		store = breaker.Store(s)
	}
	var index cache.VectorIndex
	switch cc.Index {
	case "hnsw":
		h, err := cache.NewHNSW(cache.HNSWConfig{Dim: emb.Dim()})
		if err != nil {
			return fail(err)
		}
		closers = append(closers, func() { _ = h.Close() })
		index = h
	case "redis":
		ix, err := redisstore.NewIndex(rdb, redisstore.IndexOptions{Dim: emb.Dim()})
		if err != nil {
			return fail(err)
		}
		index = breaker.Index(ix)
	case "milvus": // milvus.go / milvus_off.go (build tag milvus)
		ix, closeIx, err := dialMilvus(cc.Milvus.Addr, cc.Milvus.Collection, emb.Dim())
		if err != nil {
			return fail(fmt.Errorf("cache.milvus.addr %s: %w", cc.Milvus.Addr, err))
		}
		closers = append(closers, closeIx)
		index = ix
	}
	c, err := cache.New(cc.Pipeline, store, index, emb, cache.WithRegisterer(reg),
		cache.WithLogger(func(format string, args ...any) {
			for _, a := range args {
				if err, ok := a.(error); ok && redisstore.IsUnavailable(err) {
					return // the breaker logged its opening once
				}
			}
			log.Warn(fmt.Sprintf(format, args...))
		}))
	if err != nil {
		return fail(err)
	}
	closers = append(closers, func() { _ = c.Close() })
	return c, emb, closeAll, nil
}

// openEmbedder is the embedder cache.embedder names: lexical, bert
// (cache.bert.path) or an upstream's embeddings endpoint.
func openEmbedder(cc *CacheConfig) (cache.Embedder, error) {
	var emb cache.Embedder
	switch cc.Embedder {
	case "lexical":
		l, err := cache.NewLexical(cache.DefaultLexicalDim)
		if err != nil {
			return nil, err
		}
		emb = l
	case "bert":
		e, err := bert.Open(cc.Bert.Path, bert.Options{})
		if err != nil {
			return nil, fmt.Errorf("cache.bert.path %s: %w", cc.Bert.Path, err)
		}
		emb = e
	case "upstream":
		ue := cc.UpstreamEmbedder
		e, err := cache.NewUpstream(cache.UpstreamConfig{BaseURL: ue.BaseURL, APIKey: os.Getenv(ue.APIKeyEnv), Model: ue.Model, Dim: ue.Dim})
		if err != nil {
			return nil, fmt.Errorf("cache.upstream_embedder: %w", err)
		}
		emb = e
	}
	return emb, nil
}
