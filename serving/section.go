// Package serving owns the `models:` section of specgate's config file and
// the wiring it configures: loading a model's weights on the selected
// backend, its proposers (a draft model or Medusa heads), its model-free
// draft sources, and the engine that serves it. The gateway embeds
// ModelConfig under `models:` and adapts a loaded Model into its own
// LocalModel; cmd/specgate only calls it.
package serving

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/specgate/specgate/speculative"
)

// ModelConfig is one local model: one entry of the `models:` list.
type ModelConfig struct {
	Name        string            `yaml:"name"`
	Path        string            `yaml:"path"`    // Hugging Face directory
	Backend     string            `yaml:"backend"` // cpu|cuda|auto
	Aliases     []string          `yaml:"aliases"`
	Quantize    string            `yaml:"quantize"` // none|int8: int8 weight-only, per-row scales (engine.QuantizeWeights); an int8 checkpoint runs int8 either way
	Draft       string            `yaml:"draft"`    // draft model directory (method draft) or Medusa heads (method medusa)
	Speculative SpeculativeConfig `yaml:"speculative"`
	KVBlocks    int               `yaml:"kv_blocks"` // 0 = engine default
	MaxBatch    int               `yaml:"max_batch"` // 0 = engine default
	// DefaultMaxTokens caps generation when a request gives no max_tokens
	// (0 = up to the context length, as OpenAI does).
	DefaultMaxTokens int `yaml:"default_max_tokens"`
	// CPU tunes the CPU backend (backend cpu, or auto without a GPU).
	CPU CPUConfig `yaml:"cpu"`
	// Drafts configures the model-free draft sources (issue #11).
	Drafts DraftsConfig `yaml:"drafts"`
	// GraphWarmup captures the CUDA graphs of the step shapes the server
	// uses (decode batches, tree steps of 2..64 tokens, draft heads) at
	// load, before the first request (engine/cuda Warmup); default true
	// (nil), false: captured at their second sighting while serving. The
	// CPU backend has nothing to warm.
	GraphWarmup *bool `yaml:"graph_warmup"`
}

// DraftsConfig configures a local model's model-free drafts: the tenant's
// earlier answers and the prompt (suffix trees), a semantic-cache near
// miss's answer and the client's `prediction`; every drafted token is
// verified by the model.
type DraftsConfig struct {
	Enabled      *bool `yaml:"enabled"`       // default true
	Answers      *bool `yaml:"answers"`       // the tenant's earlier answers; default true
	PromptLookup *bool `yaml:"prompt_lookup"` // the request's own prompt; default true
	// NearMissBand: cached answers with similarity >= band that are not
	// hits become drafts; 0 = 0.35, negative = off.
	NearMissBand float32 `yaml:"near_miss_band"`
	MaxBytes     int64   `yaml:"max_bytes"` // memory for stored answers, all tenants (0 = 64 MiB)
	Policy       string  `yaml:"policy"`    // their eviction policy (default lru)
	Budget       int     `yaml:"budget"`    // most draft nodes verified per request and step (0 = 64)
}

// CPUConfig is the CPU backend's fan-out (engine/cpu.Options); zero values
// pick its defaults. Results do not depend on it.
type CPUConfig struct {
	// Threads is the most threads one pass runs on (0: GOMAXPROCS).
	Threads int `yaml:"threads"`
	// MinParallelMACs: passes of fewer multiply-adds run on one thread (0:
	// cpu.DefaultMinParallelMACs, 2^25; 1: every pass fans out).
	MinParallelMACs int `yaml:"min_parallel_macs"`
}

// SpeculativeConfig selects the proposer.
type SpeculativeConfig struct {
	Method string `yaml:"method"` // none|draft|medusa
	K      int    `yaml:"k"`      // draft length (chain) or tree depth
	Tree   string `yaml:"tree"`   // tree shape, e.g. "4,2,1" (branching per depth); medusa: package medusa's ParseTree
	// Adaptive lets the engine size each step's draft by expected
	// acceptance and measured step cost (engine.Options.FixedDraft false),
	// for method draft and medusa alike. Default true (nil); false
	// verifies the full chain or tree every step.
	Adaptive *bool `yaml:"adaptive"`
	// Heads is the Medusa heads directory (method medusa; default: draft).
	Heads string `yaml:"heads"`
	// VocabLimit restricts Medusa heads, or a draft model's LM head
	// (speculative.Config.VocabLimit, token_frequency.json next to the
	// draft or the target), to the most frequent tokens (0 = all).
	VocabLimit int `yaml:"vocab_limit"`
}

// IsAdaptive reports whether the engine's adaptive budget sizes the drafts
// (the default) rather than a fixed chain or tree every step.
func (s SpeculativeConfig) IsAdaptive() bool { return s.Adaptive == nil || *s.Adaptive }

// Mode names the effective speculation mode, as `config check` prints it:
// "none", or the method with "adaptive" or "fixed".
func (s SpeculativeConfig) Mode() string {
	if s.Method == "none" || s.Method == "" {
		return "none"
	}
	if s.IsAdaptive() {
		return s.Method + " adaptive"
	}
	return s.Method + " fixed"
}

// MedusaHeads is the Medusa heads directory of a model with method medusa:
// speculative.heads, else draft.
func (m ModelConfig) MedusaHeads() string {
	if m.Speculative.Heads != "" {
		return m.Speculative.Heads
	}
	return m.Draft
}

// ApplyDefaults fills the section's defaults: backend auto; method draft
// when a draft is named, else none; k 4 when speculating.
func (m *ModelConfig) ApplyDefaults() {
	if m.Backend == "" {
		m.Backend = "auto"
	}
	if m.Speculative.Method == "" {
		if m.Draft != "" {
			m.Speculative.Method = "draft"
		} else {
			m.Speculative.Method = "none"
		}
	}
	if m.Speculative.K == 0 && m.Speculative.Method != "none" {
		m.Speculative.K = 4
	}
}

// Validate checks the entry's values (not its name and aliases, which the
// config file checks across sections). where is the entry's key path
// ("models[0]"); every error names the offending key under it.
func (m *ModelConfig) Validate(where string) error {
	bad := func(format string, args ...any) error { return fmt.Errorf(format, args...) }
	if m.Path == "" {
		return bad("%s.path: required", where)
	}
	switch m.Backend {
	case "cpu", "cuda", "auto":
	default:
		return bad("%s.backend %q: want cpu|cuda|auto", where, m.Backend)
	}
	switch m.Quantize { // engine.CheckQuantize's names
	case "", "none", "int8":
	default:
		return bad("%s.quantize %q: want none|int8", where, m.Quantize)
	}
	switch m.Speculative.Method {
	case "none":
	case "draft":
		if m.Draft == "" {
			return bad("%s.draft: required for speculative.method %s", where, m.Speculative.Method)
		}
	case "medusa":
		if m.MedusaHeads() == "" {
			return bad("%s.speculative.heads: required for speculative.method medusa (the Medusa heads directory)", where)
		}
		if m.Speculative.VocabLimit < 0 {
			return bad("%s.speculative.vocab_limit %d: must be >= 0", where, m.Speculative.VocabLimit)
		}
	default:
		return bad("%s.speculative.method %q: want none|draft|medusa", where, m.Speculative.Method)
	}
	if m.Speculative.K < 0 || m.Speculative.K > 64 {
		return bad("%s.speculative.k %d: must be in [0,64]", where, m.Speculative.K)
	}
	if m.CPU.Threads < 0 {
		return bad("%s.cpu.threads %d: must be >= 0 (0: GOMAXPROCS)", where, m.CPU.Threads)
	}
	if m.CPU.MinParallelMACs < 0 {
		return bad("%s.cpu.min_parallel_macs %d: must be >= 0 (0: the default)", where, m.CPU.MinParallelMACs)
	}
	if m.DefaultMaxTokens < 0 {
		return bad("%s.default_max_tokens %d: must be >= 0", where, m.DefaultMaxTokens)
	}
	if d := m.Drafts; d.NearMissBand > 1 || d.NearMissBand != d.NearMissBand || d.MaxBytes < 0 || d.Budget < 0 || d.Budget > 256 {
		return bad("%s.drafts: near_miss_band %v must be <= 1, max_bytes %d >= 0, budget %d in [0,256]", where, d.NearMissBand, d.MaxBytes, d.Budget)
	}
	return nil
}

// SpecConfig maps the section's speculative settings for a draft model: a
// tree shape ("4,2,2,1": children per depth) selects a static tree,
// "dynamic" a dynamic tree, otherwise a chain of k draft tokens.
func SpecConfig(c SpeculativeConfig) (speculative.Config, error) {
	sc := speculative.Config{Method: speculative.MethodChain, K: c.K, Adaptive: c.IsAdaptive(), VocabLimit: c.VocabLimit}
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
