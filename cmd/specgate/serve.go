package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/specgate/specgate/cache"
	"github.com/specgate/specgate/cache/bert"
	"github.com/specgate/specgate/cache/redisstore"
	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/cuda"
	"github.com/specgate/specgate/gateway"
	"github.com/specgate/specgate/medusa"
	"github.com/specgate/specgate/speculative"
)

func init() {
	register("serve", "run the OpenAI-compatible gateway: serve [MODEL_DIR] [--draft DIR] [--addr HOST:PORT] [--config FILE]; the default command", runServe)
}

func newLogger(cfg *gateway.Config, w io.Writer) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(cfg.Server.LogLevel))
	opts := &slog.HandlerOptions{Level: lvl}
	if cfg.Server.LogFormat == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

func runServe(args []string) error {
	f, err := parseServeFlags(args)
	if err != nil {
		return err
	}
	cfg, err := buildServeConfig(f, os.Getenv)
	if err != nil {
		return err
	}
	if errs := preflight(cfg, os.Getenv); len(errs) > 0 {
		if f.config != "" {
			errs = annotateKeyErrors(f.config, errs)
		}
		return joinErrors(f.config, errs)
	}
	log := newLogger(cfg, os.Stderr)
	reg := prometheus.NewRegistry()

	stopProgress := loadingProgress(os.Stderr, cfg)
	models, closeModels, err := loadModels(cfg, log)
	stopProgress(err)
	if err != nil {
		return err
	}
	defer closeModels()

	opts := gateway.Options{Config: cfg, Models: models, Registry: reg, Logger: log}
	if cfg.Cache.CacheEnabled() {
		c, emb, closeCache, err := buildCache(cfg, reg, log)
		if err != nil {
			return err
		}
		defer closeCache()
		opts.Cache = c
		opts.Embedders = map[string]cache.Embedder{cfg.Cache.EmbeddingModel: emb}
	}
	srv, err := gateway.New(opts)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Server.Addr)
	if err != nil {
		return fmt.Errorf("serve: listen %s: %w", cfg.Server.Addr, err)
	}
	log.Info("specgate listening", "addr", ln.Addr().String(), "models", len(models), "upstreams", len(cfg.Upstreams), "cache", cfg.Cache.CacheEnabled())
	announce(os.Stderr, ln, cfg)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	defer signal.Stop(sig)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case s := <-sig:
		log.Info("shutting down", "signal", s.String(), "deadline", cfg.Server.ShutdownTimeout.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Server.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		log.Warn("shutdown incomplete", "err", err)
	}
	log.Info("stopped")
	return nil
}

// loadModels loads every configured local model and starts its engine.
func loadModels(cfg *gateway.Config, log *slog.Logger) ([]*gateway.LocalModel, func(), error) {
	var out []*gateway.LocalModel
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	for i, mc := range cfg.Models {
		start := time.Now()
		lo := engine.LoadOptions{Quantize: mc.Quantize}
		if mc.KVBlocks > 0 {
			lo.KVTokens = mc.KVBlocks * engine.DefaultBlockSize
		}
		// One backend selection path (engine/cuda.Select): cpu, cuda, or
		// auto (CUDA, else the CPU backend).
		onGPU := mc.Backend == "cuda" || mc.Backend == "auto"
		nb, err := cuda.Select(mc.Backend, cuda.Options{}, lo.Threads, func(err error) {
			if onGPU {
				log.Info("no GPU; using the CPU backend", "model", mc.Name, "reason", err.Error())
			}
			onGPU = false
		})
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("models[%d] %s: %w", i, mc.Name, err)
		}
		lo.NewBackend = nb
		m, err := engine.Load(mc.Path, lo)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("models[%d] %s: path %s: %w", i, mc.Name, mc.Path, err)
		}
		if m.Tokenizer == nil {
			closeAll()
			return nil, nil, fmt.Errorf("models[%d] %s: path %s: no tokenizer.json", i, mc.Name, mc.Path)
		}
		eo := engine.Options{MaxBatch: mc.MaxBatch}
		switch mc.Speculative.Method {
		case "draft":
			dlo := lo
			dlo.Quantize = "" // the target's setting
			dm, err := engine.Load(mc.Draft, dlo)
			if err != nil {
				_ = m.Close()
				closeAll()
				return nil, nil, fmt.Errorf("models[%d] %s: draft %s: %w", i, mc.Name, mc.Draft, err)
			}
			sc, err := speculativeConfig(mc.Speculative)
			var d *speculative.Draft
			if err == nil {
				d, err = speculative.NewDraft(m, dm, sc)
			}
			if err == nil {
				eo = d.EngineOptions(eo)
			}
			if err != nil {
				_ = dm.Close()
				_ = m.Close()
				closeAll()
				return nil, nil, fmt.Errorf("models[%d] %s: speculative: %w", i, mc.Name, err)
			}
			closers = append(closers, func() { _ = dm.Close() })
		case "medusa":
			p, err := medusa.New(m, medusa.Spec{Heads: mc.MedusaHeads(), Tree: mc.Speculative.Tree, VocabLimit: mc.Speculative.VocabLimit})
			if err != nil {
				_ = m.Close()
				closeAll()
				return nil, nil, fmt.Errorf("models[%d] %s: speculative (medusa): %w", i, mc.Name, err)
			}
			eo.Proposers = append(eo.Proposers, p)
		}
		if onGPU { // false when auto fell back to the CPU backend
			// multi-step greedy decoding for a lone greedy request: one host
			// round trip per 8 tokens (docs/cuda.md)
			eo.DecodeSteps = 8
		}
		drafts, err := modelDrafts(mc, draftModels(cfg, mc.Name), &eo)
		if err != nil {
			_ = m.Close()
			closeAll()
			return nil, nil, fmt.Errorf("models[%d] %s: %w", i, mc.Name, err)
		}
		if testEngineOptions != nil {
			testEngineOptions(&eo)
		}
		eng := engine.New(m, eo)
		closers = append(closers, func() { _ = eng.Close(); _ = m.Close() })
		st, _ := os.Stat(mc.Path)
		created := time.Now()
		if st != nil {
			created = st.ModTime()
		}
		out = append(out, &gateway.LocalModel{
			Name: mc.Name, Aliases: mc.Aliases, Generator: eng, Tokenizer: m.Tokenizer,
			ContextLength: m.Config.MaxPositions, DefaultMaxTokens: mc.DefaultMaxTokens, KV: m.KV(), Created: created,
			Drafts: drafts,
		})
		backend := "cpu"
		if onGPU {
			backend = "cuda"
		}
		log.Info("model loaded", "model", mc.Name, "path", mc.Path, "backend", backend, "layers", m.Config.NumLayers,
			"context", m.Config.MaxPositions, "kv_blocks", m.KV().NumBlocks(), "load_ms", time.Since(start).Milliseconds())
	}
	return out, closeAll, nil
}

// speculativeConfig maps the config's speculative section: a tree shape
// ("4,2,2,1": children per depth) selects a static tree, otherwise a chain
// of k draft tokens.
func speculativeConfig(c gateway.SpeculativeConfig) (speculative.Config, error) {
	sc := speculative.Config{Method: speculative.MethodChain, K: c.K, Adaptive: c.Adaptive, VocabLimit: c.VocabLimit}
	if c.Tree == "" {
		return sc, nil
	}
	if c.Tree == "dynamic" {
		sc.Method = speculative.MethodDynamic
		return sc, nil
	}
	sc.Method = speculative.MethodTree
	for _, f := range strings.Split(c.Tree, ",") {
		b, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || b < 1 {
			return sc, fmt.Errorf("speculative.tree %q: want comma-separated children per depth, e.g. 4,2,2,1, or dynamic", c.Tree)
		}
		sc.Branching = append(sc.Branching, b)
	}
	return sc, nil
}

// buildCache assembles store, index and embedder from the cache section.
func buildCache(cfg *gateway.Config, reg prometheus.Registerer, log *slog.Logger) (*cache.Cache, cache.Embedder, func(), error) {
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
	var emb cache.Embedder
	switch cc.Embedder {
	case "lexical":
		l, err := cache.NewLexical(cache.DefaultLexicalDim)
		if err != nil {
			return fail(err)
		}
		emb = l
	case "bert":
		e, err := bert.Open(cc.Bert.Path, bert.Options{})
		if err != nil {
			return fail(fmt.Errorf("cache.bert.path %s: %w", cc.Bert.Path, err))
		}
		emb = e
	case "upstream":
		ue := cc.UpstreamEmbedder
		e, err := cache.NewUpstream(cache.UpstreamConfig{BaseURL: ue.BaseURL, APIKey: os.Getenv(ue.APIKeyEnv), Model: ue.Model, Dim: ue.Dim})
		if err != nil {
			return fail(fmt.Errorf("cache.upstream_embedder: %w", err))
		}
		emb = e
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
