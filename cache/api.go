package cache

// This file is the contract between the cache pipeline and its pluggable
// stages (stores in cache/redisstore and cache/milvusstore, embedders in
// cache/bert). Change it only together with them.

import (
	"context"
	"errors"
	"time"
)

// Sentinel errors.
var (
	ErrNotFound = errors.New("cache: not found")
	ErrClosed   = errors.New("cache: closed")
	ErrDim      = errors.New("cache: vector dimension mismatch")
)

// Entry is one cached response. Namespace isolates tenants, models, system
// prompts and output-changing sampling parameters; it is part of every key
// and every vector filter.
type Entry struct {
	ID        string    // stable id, unique within the store (e.g. hex hash of namespace+key text)
	Namespace string    // tenant + model + system-prompt hash + sampling params
	Key       string    // normalized key text (last user message or whole conversation)
	Response  []byte    // the stored response (JSON of the completion), replayed on hit
	Vector    []float32 // embedding of Key; L2-normalized; may be nil in exact-only setups
	Cost      float64   // cost to regenerate (e.g. completion tokens), for cost-aware eviction
	CreatedAt time.Time
	ExpiresAt time.Time // zero = never
	Hits      int64
}

// Size is the accounting size of an entry in bytes.
func (e *Entry) Size() int64 {
	return int64(len(e.ID)+len(e.Namespace)+len(e.Key)+len(e.Response)) + 4*int64(len(e.Vector))
}

// Store is the scalar store: entries by id, scoped by namespace.
// Implementations: SQLite (cache package), Redis (cache/redisstore).
type Store interface {
	Put(ctx context.Context, e *Entry) error
	// Get returns ErrNotFound when id is absent, expired, or in another namespace.
	Get(ctx context.Context, namespace, id string) (*Entry, error)
	Delete(ctx context.Context, namespace, id string) error
	// Touch records a hit (for LRU/LFU bookkeeping and stats).
	Touch(ctx context.Context, namespace, id string) error
	// Scan calls fn for every live entry of the namespace ("" = all namespaces),
	// used to rebuild in-process indexes at start-up. Returning an error stops it.
	Scan(ctx context.Context, namespace string, fn func(*Entry) error) error
	Close() error
}

// Match is one vector search result. Score is the cosine similarity.
type Match struct {
	ID    string
	Score float32
}

// VectorIndex finds the nearest stored vectors within one namespace.
// Implementations: in-process HNSW (cache package), Milvus (cache/milvusstore).
type VectorIndex interface {
	Add(ctx context.Context, namespace, id string, v []float32) error
	Remove(ctx context.Context, namespace, id string) error
	// Search returns up to k matches from namespace only, best first.
	Search(ctx context.Context, namespace string, v []float32, k int) ([]Match, error)
	Close() error
}

// Embedder turns texts into L2-normalized vectors of Dim() floats.
// Implementations: the built-in lexical embedder (cache package), the local
// BERT-family sentence encoder (cache/bert), an upstream /v1/embeddings.
type Embedder interface {
	Embed(ctx context.Context, texts []string) ([][]float32, error)
	Dim() int
	Name() string
}
