package cache

import (
	"fmt"
	"time"
)

// Section is the `cache:` section of specgate's config file: which store,
// vector index and embedder back the cache, their connection settings, and
// the pipeline's own Config (inline: thresholds, TTL, capacity, policy, key
// mode, guard). It lives here, with the package it configures; the gateway's
// config file embeds it under `cache:` and prefixes the keys in its errors.
type Section struct {
	Enabled  *bool  `yaml:"enabled"`  // default true
	Store    string `yaml:"store"`    // sqlite|redis
	Index    string `yaml:"index"`    // hnsw|milvus|redis
	Embedder string `yaml:"embedder"` // lexical|bert|upstream

	SQLite struct {
		Path string `yaml:"path"` // default DATA_DIR/cache.db
	} `yaml:"sqlite"`
	Redis struct {
		Addr        string `yaml:"addr"`
		PasswordEnv string `yaml:"password_env"`
		DB          int    `yaml:"db"`
		// ReadTimeout bounds a cache read (lookup, vector search) and
		// WriteTimeout a write (store, touch, delete); default 50ms and
		// 250ms. A Redis that does not answer in time is a cache miss.
		ReadTimeout  time.Duration `yaml:"read_timeout"`
		WriteTimeout time.Duration `yaml:"write_timeout"`
		// BreakerFailures consecutive failures (default 3) open the circuit
		// breaker: the cache stops calling Redis (requests are served as
		// misses) and probes it again every BreakerCooldown (default 1s).
		BreakerFailures int           `yaml:"breaker_failures"`
		BreakerCooldown time.Duration `yaml:"breaker_cooldown"`
	} `yaml:"redis"`
	Milvus struct {
		Addr       string `yaml:"addr"`
		Collection string `yaml:"collection"`
	} `yaml:"milvus"`
	Bert struct {
		Path string `yaml:"path"`
	} `yaml:"bert"`
	UpstreamEmbedder struct {
		BaseURL   string `yaml:"base_url"`
		APIKeyEnv string `yaml:"api_key_env"`
		Model     string `yaml:"model"`
		Dim       int    `yaml:"dim"` // vector length the model returns
	} `yaml:"upstream_embedder"`
	// EmbeddingModel is the model name under which /v1/embeddings serves
	// the cache's embedder (default "specgate-embed").
	EmbeddingModel string `yaml:"embedding_model"`

	// Pipeline is the cache package's own configuration: default and
	// per-tenant thresholds, TTL, capacity and policy, key mode, guard.
	Pipeline Config `yaml:",inline"`
}

// CacheEnabled reports whether the cache is on (default true).
func (s *Section) CacheEnabled() bool { return s.Enabled == nil || *s.Enabled }

// ApplyDefaults fills what the file left unset.
func (s *Section) ApplyDefaults() {
	if s.Store == "" {
		s.Store = "sqlite"
	}
	// The same defaults as redisstore.GuardOptions, spelled out so that
	// `specgate config default` shows them.
	r := &s.Redis
	if r.ReadTimeout == 0 {
		r.ReadTimeout = 50 * time.Millisecond
	}
	if r.WriteTimeout == 0 {
		r.WriteTimeout = 250 * time.Millisecond
	}
	if r.BreakerFailures == 0 {
		r.BreakerFailures = 3
	}
	if r.BreakerCooldown == 0 {
		r.BreakerCooldown = time.Second
	}
	if s.Index == "" {
		s.Index = "hnsw"
	}
	if s.Embedder == "" {
		s.Embedder = "lexical"
	}
	if s.EmbeddingModel == "" {
		s.EmbeddingModel = "specgate-embed"
	}
	if s.Pipeline.Default.Threshold == 0 {
		s.Pipeline.Default.Threshold = DefaultThreshold
	}
	if s.Pipeline.Default.Policy == "" {
		s.Pipeline.Default.Policy = "lru"
	}
}

// SectionError is a bad value in a Section: Key is the key path inside the
// section ("store", "redis.addr"), so that the file's loader can prefix the
// section's own key and find the line.
type SectionError struct {
	Key, Msg string
}

func (e *SectionError) Error() string { return e.Key + e.Msg }

// Validate checks the section's fields and then the pipeline's Config. A
// field error is a *SectionError; a pipeline error is Config.Validate's.
func (s *Section) Validate() error {
	bad := func(key, format string, args ...any) error {
		return &SectionError{Key: key, Msg: fmt.Sprintf(format, args...)}
	}
	switch s.Store {
	case "sqlite", "redis":
	default:
		return bad("store", " %q: want sqlite|redis", s.Store)
	}
	switch s.Index {
	case "hnsw", "milvus", "redis":
	default:
		return bad("index", " %q: want hnsw|milvus|redis", s.Index)
	}
	switch s.Embedder {
	case "lexical", "bert", "upstream":
	default:
		return bad("embedder", " %q: want lexical|bert|upstream", s.Embedder)
	}
	if r := s.Redis; r.ReadTimeout < 0 || r.WriteTimeout < 0 || r.BreakerFailures < 0 || r.BreakerCooldown < 0 {
		return bad("redis", ": read_timeout, write_timeout, breaker_failures and breaker_cooldown must be >= 0")
	}
	if s.Store == "redis" && s.Redis.Addr == "" {
		return bad("redis.addr", ": required for cache.store redis")
	}
	if s.Index == "milvus" && s.Milvus.Addr == "" {
		return bad("milvus.addr", ": required for cache.index milvus")
	}
	if s.Embedder == "bert" && s.Bert.Path == "" {
		return bad("bert.path", ": required for cache.embedder bert")
	}
	if s.Embedder == "upstream" && (s.UpstreamEmbedder.BaseURL == "" || s.UpstreamEmbedder.Model == "" || s.UpstreamEmbedder.Dim <= 0) {
		return bad("upstream_embedder", ": base_url, model and dim are required for cache.embedder upstream")
	}
	return s.Pipeline.Validate()
}
