package engine

import (
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/specgate/specgate/engine/cpu"
	"github.com/specgate/specgate/engine/model"
	"github.com/specgate/specgate/tokenizer"
)

// LayerWeights are one decoder layer's typed weights (model.Layer).
type LayerWeights = model.Layer

// Weights are a model's typed weights (model.Weights): each tensor in the
// dtype it was stored in. With tied embeddings LMHead and Embed are the same
// Tensor. Weights are read-only once a backend uses them.
type Weights = model.Weights

// BackendFactory builds a backend for a model with numSlots KV slots.
type BackendFactory func(cfg Config, w *Weights, numSlots int) (Backend, error)

// LoadOptions tune Load and NewModel. The zero value is usable.
type LoadOptions struct {
	// KVTokens is the KV capacity in tokens (rounded up to whole blocks).
	// 0 = 4 full contexts, capped at 64k tokens (at least one context).
	KVTokens int
	// BlockSize is the slots per KV block; 0 = DefaultBlockSize.
	BlockSize int
	// DisablePrefixCache turns the prefix cache off.
	DisablePrefixCache bool
	// NewBackend builds the backend; nil = the CPU backend.
	NewBackend BackendFactory
	// Threads for the CPU backend; 0 = GOMAXPROCS.
	Threads int
	// MinParallelMACs for the CPU backend: passes of fewer multiply-adds
	// run on one thread (cpu.Options.MinParallelMACs; 0 = its default).
	MinParallelMACs int
	// SkipTokenizer does not load tokenizer.json (Model.Tokenizer stays nil).
	SkipTokenizer bool
	// Quantize: "" or "none" keeps the weights as stored; QuantInt8
	// quantizes the projections to int8 weight-only before the backend is
	// built (QuantizeWeights; quantize.go).
	Quantize string
}

// CPUOptions is the CPU backend's options these load options ask for.
func (o LoadOptions) CPUOptions() CPUOptions {
	return CPUOptions{Threads: o.Threads, MinParallelMACs: o.MinParallelMACs}
}

// Model is a loaded Llama model: config, weights, tokenizer, a backend and
// the block manager of its KV memory. Sequences of one model share its KV
// memory. Safe for concurrent use: forwards are serialized internally.
type Model struct {
	Config    Config
	Weights   *Weights
	Tokenizer *tokenizer.Tokenizer // nil for NewRandomModel models
	Dir       string               // source directory ("" for random models)

	fwd     sync.Mutex // serializes backend.Forward / CopySlots through sequences
	backend Backend
	kv      *BlockManager
}

// Backend returns the model's backend. Callers that drive it directly must
// not run concurrently with sequences of this model (use Sequence instead).
func (m *Model) Backend() Backend { return m.backend }

// KV returns the model's block manager.
func (m *Model) KV() *BlockManager { return m.kv }

// Close releases the backend.
func (m *Model) Close() error { return m.backend.Close() }

// NewModel builds a Model from a config and weights (validated against the
// config) with a backend as opts say.
func NewModel(cfg Config, w *Weights, opts LoadOptions) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := checkWeights(cfg, w); err != nil {
		return nil, err
	}
	w, err := QuantizeWeights(cfg, w, opts.Quantize)
	if err != nil {
		return nil, err
	}
	bs := opts.BlockSize
	if bs <= 0 {
		bs = DefaultBlockSize
	}
	kvTokens := opts.KVTokens
	if kvTokens <= 0 {
		kvTokens = min(4*cfg.MaxPositions, 1<<16)
		kvTokens = max(kvTokens, min(cfg.MaxPositions, 1<<20))
	}
	numBlocks := (kvTokens + bs - 1) / bs
	nb := opts.NewBackend
	if nb == nil {
		nb = func(cfg Config, w *Weights, numSlots int) (Backend, error) {
			return cpu.New(cfg, w, numSlots, opts.CPUOptions())
		}
	}
	be, err := nb(cfg, w, numBlocks*bs)
	if err != nil {
		return nil, err
	}
	m := &Model{Config: cfg, Weights: w, backend: be}
	m.kv = NewBlockManager(numBlocks, bs, be, !opts.DisablePrefixCache)
	return m, nil
}

func checkWeights(cfg Config, w *Weights) error { return model.Check(cfg, w) }

// LoadWeights reads the weights of cfg from dir's safetensors files, each
// tensor in its stored dtype (see model.LoadWeights).
func LoadWeights(dir string, cfg Config) (*Weights, error) { return model.LoadWeights(dir, cfg) }

// Load reads a Hugging Face model directory: config.json,
// generation_config.json (optional), safetensors weights and tokenizer.json
// (unless opts.SkipTokenizer). EOS ids of the tokenizer are added to Config.EOS.
func Load(dir string, opts LoadOptions) (*Model, error) {
	cfg, err := LoadConfig(dir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	w, err := LoadWeights(dir, cfg)
	if err != nil {
		return nil, err
	}
	var tok *tokenizer.Tokenizer
	if !opts.SkipTokenizer {
		tok, err = tokenizer.Load(dir)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", dir, err)
		}
		if tok.VocabSize() > cfg.VocabSize {
			return nil, fmt.Errorf("%s: tokenizer.json: %d ids exceed config.json vocab_size %d: %w", dir, tok.VocabSize(), cfg.VocabSize, ErrBadConfig)
		}
		for _, id := range tok.EOS() {
			if id >= 0 && int(id) < cfg.VocabSize && !containsID(cfg.EOS, id) {
				cfg.EOS = append(cfg.EOS, id)
			}
		}
	}
	m, err := NewModel(cfg, w, opts)
	if err != nil {
		return nil, err
	}
	m.Tokenizer = tok
	m.Dir = dir
	runtime.GC()
	return m, nil
}

// NewRandomModel builds a model with deterministic random weights (same cfg
// and seed, same weights) and no tokenizer, for tests. Panics on an invalid
// cfg (tests build cfg by hand). The backend and KV follow opts.
func NewRandomModel(cfg Config, seed uint64, opts ...LoadOptions) *Model {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	w := RandomWeights(cfg, seed)
	var o LoadOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	m, err := NewModel(cfg, w, o)
	if err != nil {
		panic(err)
	}
	return m
}

// RandomWeights draws deterministic float32 weights for cfg (see
// model.RandomWeights).
func RandomWeights(cfg Config, seed uint64) *Weights { return model.RandomWeights(cfg, seed) }

// SaveSafetensors writes config.json and model.safetensors of m into dir
// (created if needed), in the HF layout Load reads back, each tensor in its
// dtype.
func (m *Model) SaveSafetensors(dir string) error { return model.Save(dir, m.Config, m.Weights) }

var errFreed = errors.New("engine: sequence already freed")
