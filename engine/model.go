package engine

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/specgate/specgate/engine/safetensors"
	"github.com/specgate/specgate/engine/tokenizer"
)

// LayerWeights are one decoder layer's float32 weights. Matrices are
// row-major [out][in] as in the HF checkpoint (nn.Linear.weight).
type LayerWeights struct {
	AttnNorm []float32 // [Hidden]            input_layernorm.weight
	Wq       []float32 // [NumHeads*HeadDim][Hidden]
	Wk       []float32 // [NumKVHeads*HeadDim][Hidden]
	Wv       []float32 // [NumKVHeads*HeadDim][Hidden]
	Wo       []float32 // [Hidden][NumHeads*HeadDim]
	MLPNorm  []float32 // [Hidden]            post_attention_layernorm.weight
	WGate    []float32 // [Intermediate][Hidden]
	WUp      []float32 // [Intermediate][Hidden]
	WDown    []float32 // [Hidden][Intermediate]
}

// Weights are a Llama model's float32 weights. With tied embeddings LMHead
// and Embed are the same slice. Weights are read-only once a backend uses them.
type Weights struct {
	Embed  []float32 // [Vocab][Hidden]
	Layers []LayerWeights
	Norm   []float32 // [Hidden]
	LMHead []float32 // [Vocab][Hidden]
}

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
	// SkipTokenizer does not load tokenizer.json (Model.Tokenizer stays nil).
	SkipTokenizer bool
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
			return NewCPUBackend(cfg, w, numSlots, opts.Threads)
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

func checkWeights(cfg Config, w *Weights) error {
	H, V, I := cfg.HiddenSize, cfg.VocabSize, cfg.IntermediateSize
	q, kv := cfg.QDim(), cfg.KVDim()
	chk := func(name string, got []float32, want int) error {
		if len(got) != want {
			return fmt.Errorf("%s: %d elements, want %d: %w", name, len(got), want, ErrBadWeights)
		}
		return nil
	}
	if err := chk("model.embed_tokens.weight", w.Embed, V*H); err != nil {
		return err
	}
	if err := chk("model.norm.weight", w.Norm, H); err != nil {
		return err
	}
	if err := chk("lm_head.weight", w.LMHead, V*H); err != nil {
		return err
	}
	if len(w.Layers) != cfg.NumLayers {
		return fmt.Errorf("model.layers: %d layers, want %d: %w", len(w.Layers), cfg.NumLayers, ErrBadWeights)
	}
	for i, l := range w.Layers {
		p := fmt.Sprintf("model.layers.%d.", i)
		for _, c := range []struct {
			n string
			w []float32
			s int
		}{
			{"input_layernorm.weight", l.AttnNorm, H}, {"self_attn.q_proj.weight", l.Wq, q * H},
			{"self_attn.k_proj.weight", l.Wk, kv * H}, {"self_attn.v_proj.weight", l.Wv, kv * H},
			{"self_attn.o_proj.weight", l.Wo, H * q}, {"post_attention_layernorm.weight", l.MLPNorm, H},
			{"mlp.gate_proj.weight", l.WGate, I * H}, {"mlp.up_proj.weight", l.WUp, I * H},
			{"mlp.down_proj.weight", l.WDown, H * I},
		} {
			if err := chk(p+c.n, c.w, c.s); err != nil {
				return err
			}
		}
	}
	return nil
}

// tensorShapes lists every tensor name of cfg with its expected shape.
func tensorShapes(cfg Config) [][2]any {
	H, V, I := int64(cfg.HiddenSize), int64(cfg.VocabSize), int64(cfg.IntermediateSize)
	q, kv := int64(cfg.QDim()), int64(cfg.KVDim())
	out := [][2]any{{"model.embed_tokens.weight", []int64{V, H}}}
	for i := range cfg.NumLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		out = append(out,
			[2]any{p + "input_layernorm.weight", []int64{H}},
			[2]any{p + "self_attn.q_proj.weight", []int64{q, H}},
			[2]any{p + "self_attn.k_proj.weight", []int64{kv, H}},
			[2]any{p + "self_attn.v_proj.weight", []int64{kv, H}},
			[2]any{p + "self_attn.o_proj.weight", []int64{H, q}},
			[2]any{p + "post_attention_layernorm.weight", []int64{H}},
			[2]any{p + "mlp.gate_proj.weight", []int64{I, H}},
			[2]any{p + "mlp.up_proj.weight", []int64{I, H}},
			[2]any{p + "mlp.down_proj.weight", []int64{H, I}},
		)
	}
	out = append(out, [2]any{"model.norm.weight", []int64{H}})
	if !cfg.TieWordEmbeddings {
		out = append(out, [2]any{"lm_head.weight", []int64{V, H}})
	}
	return out
}

func shapeEq(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// LoadWeights reads the weights of cfg from dir's safetensors files
// (model.safetensors or a sharded index), upcasting F16/BF16 to float32.
// Every tensor's shape is checked against cfg; a missing, misshapen or
// unexpected tensor is an error naming it.
func LoadWeights(dir string, cfg Config) (*Weights, error) {
	set, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadWeights, err)
	}
	defer set.Close()
	want := tensorShapes(cfg)
	known := map[string]bool{}
	for _, ws := range want {
		known[ws[0].(string)] = true
	}
	for _, n := range set.Names() {
		if known[n] || strings.HasSuffix(n, "rotary_emb.inv_freq") || (cfg.TieWordEmbeddings && n == "lm_head.weight") {
			continue
		}
		return nil, fmt.Errorf("%s: tensor %q: unexpected for LlamaForCausalLM with %d layers: %w", dir, n, cfg.NumLayers, ErrBadWeights)
	}
	read := func(name string, shape []int64) ([]float32, error) {
		info, ok := set.Info(name)
		if !ok {
			return nil, fmt.Errorf("%s: tensor %q: missing: %w", dir, name, ErrBadWeights)
		}
		if !info.DType.Float() {
			return nil, fmt.Errorf("%s: tensor %q: dtype %s unsupported (want F32, F16 or BF16): %w", dir, name, info.DType, ErrBadWeights)
		}
		if !shapeEq(info.Shape, shape) {
			return nil, fmt.Errorf("%s: tensor %q: shape %v, want %v: %w", dir, name, info.Shape, shape, ErrBadWeights)
		}
		n := int64(1)
		for _, d := range shape {
			n *= d
		}
		buf := make([]float32, n)
		if err := set.ReadFloat32Into(name, buf); err != nil {
			return nil, fmt.Errorf("%s: tensor %q: %w: %w", dir, name, ErrBadWeights, err)
		}
		return buf, nil
	}
	w := &Weights{Layers: make([]LayerWeights, cfg.NumLayers)}
	got := map[string][]float32{}
	for _, ws := range want {
		name, shape := ws[0].(string), ws[1].([]int64)
		b, err := read(name, shape)
		if err != nil {
			return nil, err
		}
		got[name] = b
	}
	w.Embed = got["model.embed_tokens.weight"]
	w.Norm = got["model.norm.weight"]
	if cfg.TieWordEmbeddings {
		w.LMHead = w.Embed
	} else {
		w.LMHead = got["lm_head.weight"]
	}
	for i := range w.Layers {
		p := fmt.Sprintf("model.layers.%d.", i)
		w.Layers[i] = LayerWeights{
			AttnNorm: got[p+"input_layernorm.weight"], Wq: got[p+"self_attn.q_proj.weight"],
			Wk: got[p+"self_attn.k_proj.weight"], Wv: got[p+"self_attn.v_proj.weight"],
			Wo: got[p+"self_attn.o_proj.weight"], MLPNorm: got[p+"post_attention_layernorm.weight"],
			WGate: got[p+"mlp.gate_proj.weight"], WUp: got[p+"mlp.up_proj.weight"], WDown: got[p+"mlp.down_proj.weight"],
		}
	}
	return w, nil
}

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

// RandomWeights draws deterministic weights for cfg: matrices uniform with
// standard deviation about 1/sqrt(fan-in) (so activations stay O(1)), norm
// weights near 1, embeddings with unit scale.
func RandomWeights(cfg Config, seed uint64) *Weights {
	r := rand.New(rand.NewPCG(seed, 0x5eed5eed))
	H, V, I := cfg.HiddenSize, cfg.VocabSize, cfg.IntermediateSize
	q, kv := cfg.QDim(), cfg.KVDim()
	mat := func(out, in int, scale float64) []float32 {
		a := scale * math.Sqrt(3/float64(in))
		v := make([]float32, out*in)
		for i := range v {
			v[i] = float32((2*r.Float64() - 1) * a)
		}
		return v
	}
	norm := func() []float32 {
		v := make([]float32, H)
		for i := range v {
			v[i] = float32(1 + 0.2*(2*r.Float64()-1))
		}
		return v
	}
	w := &Weights{Embed: mat(V, H, math.Sqrt(float64(H)))}
	for range cfg.NumLayers {
		w.Layers = append(w.Layers, LayerWeights{
			AttnNorm: norm(), Wq: mat(q, H, 1), Wk: mat(kv, H, 1), Wv: mat(kv, H, 1), Wo: mat(H, q, 0.5),
			MLPNorm: norm(), WGate: mat(I, H, 1), WUp: mat(I, H, 1), WDown: mat(H, I, 0.5),
		})
	}
	w.Norm = norm()
	if cfg.TieWordEmbeddings {
		w.LMHead = w.Embed
	} else {
		w.LMHead = mat(V, H, 2)
	}
	return w
}

// SaveSafetensors writes config.json and model.safetensors (float32) of m
// into dir (created if needed), in the HF layout Load reads back.
func (m *Model) SaveSafetensors(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cj, err := m.Config.ConfigJSON()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cj, 0o644); err != nil {
		return err
	}
	w := m.Weights
	byName := map[string][]float32{"model.embed_tokens.weight": w.Embed, "model.norm.weight": w.Norm, "lm_head.weight": w.LMHead}
	for i, l := range w.Layers {
		p := fmt.Sprintf("model.layers.%d.", i)
		byName[p+"input_layernorm.weight"] = l.AttnNorm
		byName[p+"self_attn.q_proj.weight"] = l.Wq
		byName[p+"self_attn.k_proj.weight"] = l.Wk
		byName[p+"self_attn.v_proj.weight"] = l.Wv
		byName[p+"self_attn.o_proj.weight"] = l.Wo
		byName[p+"post_attention_layernorm.weight"] = l.MLPNorm
		byName[p+"mlp.gate_proj.weight"] = l.WGate
		byName[p+"mlp.up_proj.weight"] = l.WUp
		byName[p+"mlp.down_proj.weight"] = l.WDown
	}
	var ts []safetensors.Tensor
	for _, ws := range tensorShapes(m.Config) {
		name := ws[0].(string)
		ts = append(ts, safetensors.Tensor{Name: name, DType: safetensors.F32, Shape: ws[1].([]int64), Data: safetensors.EncodeF32(byName[name])})
	}
	return safetensors.Write(filepath.Join(dir, safetensors.SingleFileName), ts, map[string]string{"format": "pt"})
}

var errFreed = errors.New("engine: sequence already freed")
