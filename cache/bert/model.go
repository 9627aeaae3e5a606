// Package bert is a local sentence encoder for BERT-family models in the
// all-MiniLM-L6-v2 layout, in pure Go: a Hugging Face model directory with
// config.json (BertModel), model.safetensors and tokenizer.json (WordPiece).
// Texts are tokenized ([CLS] … [SEP], truncated), run through the BERT
// encoder, mean-pooled over the attention mask and L2-normalized; the
// Encoder implements cache.Embedder.
//
// The weights are read with package safetensors, a leaf (it imports nothing
// of ours) shared with the engine; cache still imports nothing of engine.
//
// Numerics are float32 (reductions of LayerNorm and softmax in float64),
// checked against PyTorch on a random-init BertModel in
// testdata/minibert (see golden_test.go).
package bert

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/specgate/specgate/cache"
	"github.com/specgate/specgate/safetensors"

	"github.com/specgate/specgate/vecmath"
)

// Sentinel errors.
var (
	ErrFormat = errors.New("bert: bad model file")
	ErrInput  = errors.New("bert: bad input")
)

// Config is the part of a BertModel config.json the encoder uses.
type Config struct {
	VocabSize             int     `json:"vocab_size"`
	HiddenSize            int     `json:"hidden_size"`
	NumHiddenLayers       int     `json:"num_hidden_layers"`
	NumAttentionHeads     int     `json:"num_attention_heads"`
	IntermediateSize      int     `json:"intermediate_size"`
	HiddenAct             string  `json:"hidden_act"`
	MaxPositionEmbeddings int     `json:"max_position_embeddings"`
	TypeVocabSize         int     `json:"type_vocab_size"`
	LayerNormEps          float64 `json:"layer_norm_eps"`
	PositionEmbeddingType string  `json:"position_embedding_type"`
}

// LoadConfig reads and validates config.json.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("bert: %w", err)
	}
	if len(data) > 1<<20 {
		return nil, fmt.Errorf("%w: %s larger than 1 MiB", ErrFormat, path)
	}
	c := &Config{HiddenAct: "gelu", LayerNormEps: 1e-12, TypeVocabSize: 2, PositionEmbeddingType: "absolute"}
	if err := json.Unmarshal(data, c); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrFormat, path, err)
	}
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrFormat, path, err)
	}
	return c, nil
}

func (c *Config) validate() error {
	check := func(field string, v, lo, hi int) error {
		if v < lo || v > hi {
			return fmt.Errorf("%s = %d outside [%d, %d]", field, v, lo, hi)
		}
		return nil
	}
	for _, e := range []error{
		check("vocab_size", c.VocabSize, 1, 1<<22),
		check("hidden_size", c.HiddenSize, 1, 16384),
		check("num_hidden_layers", c.NumHiddenLayers, 0, 256),
		check("num_attention_heads", c.NumAttentionHeads, 1, 1024),
		check("intermediate_size", c.IntermediateSize, 1, 1<<16),
		check("max_position_embeddings", c.MaxPositionEmbeddings, 2, 1<<16),
		check("type_vocab_size", c.TypeVocabSize, 1, 1024),
	} {
		if e != nil {
			return e
		}
	}
	if c.HiddenSize%c.NumAttentionHeads != 0 {
		return fmt.Errorf("hidden_size %d not divisible by num_attention_heads %d", c.HiddenSize, c.NumAttentionHeads)
	}
	if !(c.LayerNormEps > 0 && c.LayerNormEps < 1) {
		return fmt.Errorf("layer_norm_eps = %v outside (0, 1)", c.LayerNormEps)
	}
	if _, ok := activations[c.HiddenAct]; !ok {
		return fmt.Errorf("hidden_act %q unsupported (want gelu, gelu_new, gelu_pytorch_tanh or relu)", c.HiddenAct)
	}
	if c.PositionEmbeddingType != "absolute" {
		return fmt.Errorf("position_embedding_type %q unsupported (want absolute)", c.PositionEmbeddingType)
	}
	return nil
}

var activations = map[string]func(float32) float32{
	"gelu": func(x float32) float32 { // exact, erf-based
		return float32(0.5 * float64(x) * (1 + math.Erf(float64(x)/math.Sqrt2)))
	},
	"gelu_new":          geluTanh,
	"gelu_pytorch_tanh": geluTanh,
	"relu": func(x float32) float32 {
		if x < 0 {
			return 0
		}
		return x
	},
}

func geluTanh(x float32) float32 {
	v := float64(x)
	return float32(0.5 * v * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(v+0.044715*v*v*v))))
}

// linear is y = x·Wᵀ + b with W row-major [out, in] (PyTorch nn.Linear).
type linear struct {
	w        []float32 // [out, in]
	b        []float32 // [out]
	in, out_ int
}

type layerNorm struct{ g, b []float32 }

type layer struct {
	q, k, v, attnOut linear
	attnLN           layerNorm
	inter, out       linear
	outLN            layerNorm
}

// Model holds the weights of a BertModel (all float32, read-only after
// load; safe for concurrent forwards).
type Model struct {
	Cfg    Config
	word   []float32 // [vocab, H]
	pos    []float32 // [maxPos, H]
	typ    []float32 // [typeVocab, H]
	embLN  layerNorm
	layers []layer
	act    func(float32) float32
}

// LoadModel reads config.json and the safetensors weights of dir. Tensor
// names may carry a "bert." prefix; LayerNorm parameters may be named
// weight/bias or gamma/beta.
func LoadModel(dir string) (*Model, error) {
	cfg, err := LoadConfig(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	set, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, fmt.Errorf("bert: %w", err)
	}
	defer set.Close()
	prefix := ""
	if _, ok := set.Info("embeddings.word_embeddings.weight"); !ok {
		if _, ok := set.Info("bert.embeddings.word_embeddings.weight"); ok {
			prefix = "bert."
		}
	}
	H, I := cfg.HiddenSize, cfg.IntermediateSize
	read := func(name string, shape ...int) ([]float32, error) {
		data, dims, err := set.ReadFloat32(prefix + name)
		if err != nil {
			return nil, fmt.Errorf("bert: %s: %w", dir, err)
		}
		ok := len(dims) == len(shape)
		for i := 0; ok && i < len(shape); i++ {
			ok = dims[i] == int64(shape[i])
		}
		if !ok {
			return nil, fmt.Errorf("%w: %s: tensor %s has shape %v, config wants %v", ErrFormat, dir, prefix+name, dims, shape)
		}
		return data, nil
	}
	readLN := func(base string) (layerNorm, error) {
		for _, names := range [][2]string{{"weight", "bias"}, {"gamma", "beta"}} {
			if _, ok := set.Info(prefix + base + "." + names[0]); !ok {
				continue
			}
			g, err := read(base+"."+names[0], H)
			if err != nil {
				return layerNorm{}, err
			}
			b, err := read(base+"."+names[1], H)
			return layerNorm{g, b}, err
		}
		return layerNorm{}, fmt.Errorf("%w: %s: no tensor %s%s.weight", ErrFormat, dir, prefix, base)
	}
	readLin := func(base string, out, in int) (linear, error) {
		w, err := read(base+".weight", out, in)
		if err != nil {
			return linear{}, err
		}
		b, err := read(base+".bias", out)
		return linear{w: w, b: b, in: in, out_: out}, err
	}
	m := &Model{Cfg: *cfg, act: activations[cfg.HiddenAct]}
	if m.word, err = read("embeddings.word_embeddings.weight", cfg.VocabSize, H); err != nil {
		return nil, err
	}
	if m.pos, err = read("embeddings.position_embeddings.weight", cfg.MaxPositionEmbeddings, H); err != nil {
		return nil, err
	}
	if m.typ, err = read("embeddings.token_type_embeddings.weight", cfg.TypeVocabSize, H); err != nil {
		return nil, err
	}
	if m.embLN, err = readLN("embeddings.LayerNorm"); err != nil {
		return nil, err
	}
	m.layers = make([]layer, cfg.NumHiddenLayers)
	for i := range m.layers {
		p := fmt.Sprintf("encoder.layer.%d.", i)
		l := &m.layers[i]
		for _, x := range []struct {
			dst     *linear
			name    string
			out, in int
		}{
			{&l.q, "attention.self.query", H, H},
			{&l.k, "attention.self.key", H, H},
			{&l.v, "attention.self.value", H, H},
			{&l.attnOut, "attention.output.dense", H, H},
			{&l.inter, "intermediate.dense", I, H},
			{&l.out, "output.dense", H, I},
		} {
			if *x.dst, err = readLin(p+x.name, x.out, x.in); err != nil {
				return nil, err
			}
		}
		if l.attnLN, err = readLN(p + "attention.output.LayerNorm"); err != nil {
			return nil, err
		}
		if l.outLN, err = readLN(p + "output.LayerNorm"); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Forward runs the encoder over one sequence and returns the last hidden
// states, row-major [len(ids), HiddenSize], owned by the caller. mask has
// one entry per id (1 = attend, 0 = padding) or is nil for all ones;
// token types are all 0. Padding positions are computed but attended by no
// one, so their rows are meaningless.
func (m *Model) Forward(ids []int32, mask []int32) ([]float32, error) {
	c := &m.Cfg
	T, H := len(ids), c.HiddenSize
	if T == 0 || T > c.MaxPositionEmbeddings {
		return nil, fmt.Errorf("%w: %d tokens, want 1..%d", ErrInput, T, c.MaxPositionEmbeddings)
	}
	if mask != nil && len(mask) != T {
		return nil, fmt.Errorf("%w: mask of %d entries for %d tokens", ErrInput, len(mask), T)
	}
	x := make([]float32, T*H)
	for t, id := range ids {
		if id < 0 || int(id) >= c.VocabSize {
			return nil, fmt.Errorf("%w: token id %d outside [0, %d)", ErrInput, id, c.VocabSize)
		}
		row := x[t*H : (t+1)*H]
		w, p, ty := m.word[int(id)*H:], m.pos[t*H:], m.typ[:H]
		for j := range row {
			row[j] = w[j] + p[j] + ty[j]
		}
	}
	m.layerNormRows(x, m.embLN)
	nh := c.NumAttentionHeads
	dh := H / nh
	scale := float32(1 / math.Sqrt(float64(dh)))
	q, k, v := make([]float32, T*H), make([]float32, T*H), make([]float32, T*H)
	ctxv := make([]float32, T*H)
	tmp := make([]float32, T*H)
	inter := make([]float32, T*c.IntermediateSize)
	scores := make([]float32, T)
	for li := range m.layers {
		l := &m.layers[li]
		l.q.apply(q, x, T)
		l.k.apply(k, x, T)
		l.v.apply(v, x, T)
		for h := range nh {
			off := h * dh
			for i := range T {
				qi := q[i*H+off : i*H+off+dh]
				mx := float32(math.Inf(-1))
				for j := range T {
					if mask != nil && mask[j] == 0 {
						scores[j] = float32(math.Inf(-1))
						continue
					}
					scores[j] = vecmath.Dot(qi, k[j*H+off:j*H+off+dh]) * scale
					mx = max(mx, scores[j])
				}
				var sum float64
				for j := range T {
					if math.IsInf(float64(scores[j]), -1) {
						scores[j] = 0
						continue
					}
					e := math.Exp(float64(scores[j] - mx))
					scores[j] = float32(e)
					sum += e
				}
				out := ctxv[i*H+off : i*H+off+dh]
				clear(out)
				if sum == 0 {
					continue // every key masked
				}
				inv := float32(1 / sum)
				for j := range T {
					p := scores[j] * inv
					if p == 0 {
						continue
					}
					vj := v[j*H+off : j*H+off+dh]
					for d := range out {
						out[d] += p * vj[d]
					}
				}
			}
		}
		l.attnOut.apply(tmp, ctxv, T)
		for i := range x {
			x[i] += tmp[i]
		}
		m.layerNormRows(x, l.attnLN)
		l.inter.apply(inter, x, T)
		for i, z := range inter {
			inter[i] = m.act(z)
		}
		l.out.apply(tmp, inter, T)
		for i := range x {
			x[i] += tmp[i]
		}
		m.layerNormRows(x, l.outLN)
	}
	return x, nil
}

// parallelMACs is the work (T·in·out multiply-adds) above which a linear
// layer splits its output columns over GOMAXPROCS goroutines.
const parallelMACs = 1 << 20

// apply computes dst[T, out] = src[T, in]·Wᵀ + b.
func (l *linear) apply(dst, src []float32, T int) {
	workers := runtime.GOMAXPROCS(0)
	if T*l.in*l.out_ < parallelMACs || workers == 1 {
		l.applyRange(dst, src, T, 0, l.out_)
		return
	}
	chunk := (l.out_ + workers - 1) / workers
	chunk = (chunk + 3) &^ 3 // keep 4-row blocks whole
	var wg sync.WaitGroup
	for lo := 0; lo < l.out_; lo += chunk {
		hi := min(lo+chunk, l.out_)
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.applyRange(dst, src, T, lo, hi)
		}()
	}
	wg.Wait()
}

// applyRange computes output columns [lo, hi) of every row, four weight
// rows at a time so that each input value is loaded once per four outputs.
func (l *linear) applyRange(dst, src []float32, T, lo, hi int) {
	in, out := l.in, l.out_
	for t := range T {
		xs := src[t*in : (t+1)*in]
		ys := dst[t*out : (t+1)*out]
		o := lo
		for ; o+4 <= hi; o += 4 {
			w0 := l.w[o*in : (o+1)*in : (o+1)*in]
			w1 := l.w[(o+1)*in : (o+2)*in]
			w2 := l.w[(o+2)*in : (o+3)*in]
			w3 := l.w[(o+3)*in : (o+4)*in]
			w0, w1, w2, w3 = w0[:len(xs)], w1[:len(xs)], w2[:len(xs)], w3[:len(xs)] // bounds-check elimination
			var s0, s1, s2, s3 float32
			for i, x := range xs {
				s0 += x * w0[i]
				s1 += x * w1[i]
				s2 += x * w2[i]
				s3 += x * w3[i]
			}
			ys[o] = s0 + l.b[o]
			ys[o+1] = s1 + l.b[o+1]
			ys[o+2] = s2 + l.b[o+2]
			ys[o+3] = s3 + l.b[o+3]
		}
		for ; o < hi; o++ {
			ys[o] = vecmath.Dot(xs, l.w[o*in:(o+1)*in]) + l.b[o]
		}
	}
}

// layerNormRows normalizes every row of x [*, H] in place.
func (m *Model) layerNormRows(x []float32, ln layerNorm) {
	H := m.Cfg.HiddenSize
	eps := m.Cfg.LayerNormEps
	for r := 0; r < len(x); r += H {
		row := x[r : r+H]
		var mean float64
		for _, v := range row {
			mean += float64(v)
		}
		mean /= float64(H)
		var vr float64
		for _, v := range row {
			d := float64(v) - mean
			vr += d * d
		}
		vr /= float64(H)
		inv := 1 / math.Sqrt(vr+eps)
		for j, v := range row {
			row[j] = float32((float64(v)-mean)*inv)*ln.g[j] + ln.b[j]
		}
	}
}

// MeanPool averages the rows of hidden [len(mask), H] whose mask is 1
// (all rows when mask is nil). The result is new and owned by the caller.
func MeanPool(hidden []float32, mask []int32, H int) []float32 {
	out := make([]float32, H)
	acc := make([]float64, H)
	n := 0
	for t := 0; t*H < len(hidden); t++ {
		if mask != nil && mask[t] == 0 {
			continue
		}
		n++
		for j, v := range hidden[t*H : (t+1)*H] {
			acc[j] += float64(v)
		}
	}
	d := math.Max(float64(n), 1e-9)
	for j := range out {
		out[j] = float32(acc[j] / d)
	}
	return out
}

// Normalize scales v to unit L2 norm in place (a zero vector stays zero).
func Normalize(v []float32) { vecmath.Normalize(v) }

// Options configures an Encoder.
type Options struct {
	// MaxLen is the maximum sequence length in tokens including the
	// post-processor's specials ([CLS], [SEP]). 0 = tokenizer.json's
	// truncation.max_length when set, else 256 (sentence-transformers'
	// max_seq_length of all-MiniLM-L6-v2), in both cases at most
	// max_position_embeddings; -1 = max_position_embeddings.
	MaxLen int
	// Name is returned by Name(); "bert:" + the directory's base name when empty.
	Name string
	// Workers bounds the texts encoded in parallel; GOMAXPROCS when 0.
	Workers int
}

// Encoder is a cache.Embedder over a BERT model and its tokenizer.
type Encoder struct {
	Model *Model
	Tok   *Tokenizer
	opt   Options
}

var _ cache.Embedder = (*Encoder)(nil)

// Open loads the model directory (config.json, model.safetensors or its
// index, tokenizer.json).
func Open(dir string, opt Options) (*Encoder, error) {
	m, err := LoadModel(dir)
	if err != nil {
		return nil, err
	}
	tok, err := LoadTokenizer(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, err
	}
	if n := tok.VocabSize(); n > m.Cfg.VocabSize {
		return nil, fmt.Errorf("%w: %s: tokenizer has ids up to %d, model vocab_size %d", ErrFormat, dir, n-1, m.Cfg.VocabSize)
	}
	if opt.Name == "" {
		opt.Name = "bert:" + filepath.Base(filepath.Clean(dir))
	}
	return NewEncoder(m, tok, opt)
}

// NewEncoder combines a loaded model and tokenizer.
func NewEncoder(m *Model, tok *Tokenizer, opt Options) (*Encoder, error) {
	switch opt.MaxLen {
	case 0:
		opt.MaxLen = 256
		if n := tok.Truncation(); n > 0 {
			opt.MaxLen = n
		}
		opt.MaxLen = min(opt.MaxLen, m.Cfg.MaxPositionEmbeddings)
	case -1:
		opt.MaxLen = m.Cfg.MaxPositionEmbeddings
	}
	if opt.MaxLen < 2 || opt.MaxLen > m.Cfg.MaxPositionEmbeddings {
		return nil, fmt.Errorf("%w: Options.MaxLen %d outside [2, %d]", ErrInput, opt.MaxLen, m.Cfg.MaxPositionEmbeddings)
	}
	if opt.Name == "" {
		opt.Name = "bert"
	}
	if opt.Workers <= 0 {
		opt.Workers = runtime.GOMAXPROCS(0)
	}
	return &Encoder{Model: m, Tok: tok, opt: opt}, nil
}

// Dim returns the hidden size.
func (e *Encoder) Dim() int { return e.Model.Cfg.HiddenSize }

// Name identifies the encoder (part of cache namespaces and index names).
func (e *Encoder) Name() string { return e.opt.Name }

// MaxLen returns the token limit including [CLS] and [SEP].
func (e *Encoder) MaxLen() int { return e.opt.MaxLen }

// Pooled returns the mean-pooled (not normalized) embedding of text and its
// token ids.
func (e *Encoder) Pooled(text string) ([]float32, []int32, error) {
	ids := e.Tok.Encode(text, e.opt.MaxLen)
	h, err := e.Model.Forward(ids, nil)
	if err != nil {
		return nil, nil, err
	}
	return MeanPool(h, nil, e.Dim()), ids, nil
}

// Embed returns one L2-normalized vector of Dim() floats per text, in
// order; the slices are new and owned by the caller. Texts are encoded in
// parallel; ctx cancellation stops between texts.
func (e *Encoder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	errs := make([]error, len(texts))
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(e.opt.Workers, len(texts)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := ctx.Err(); err != nil {
					errs[i] = err
					continue
				}
				v, _, err := e.Pooled(texts[i])
				if err != nil {
					errs[i] = fmt.Errorf("bert: text %d: %w", i, err)
					continue
				}
				Normalize(v)
				out[i] = v
			}
		}()
	}
	for i := range texts {
		next <- i
	}
	close(next)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}
