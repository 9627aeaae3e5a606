// Package medusa runs Medusa heads (Cai et al. 2024, "Medusa: Simple LLM
// Inference Acceleration Framework with Multiple Decoding Heads") as an
// engine.Proposer: small residual heads on the target's final hidden state
// predict the tokens after the next one, their top-k candidates form a
// sparse token tree, and the engine verifies the tree in the target's own
// forward.
//
// Format: the directory the Medusa reference implementation
// (FasterDecoding/Medusa) writes. config.json names medusa_num_heads and
// medusa_num_layers; medusa_lm_head.safetensors holds the state dict of the
// reference's nn.ModuleList of heads, each an nn.Sequential of
// medusa_num_layers ResBlocks (x + SiLU(Linear(x))) and, in the current
// layout, a final Linear(hidden, vocab, bias=False):
//
//	{head}.{layer}.linear.weight  [hidden][hidden]
//	{head}.{layer}.linear.bias    [hidden]
//	{head}.{medusa_num_layers}.weight  [vocab][hidden]  (absent: the base lm_head)
//
// or [head_vocab][hidden] when config.json's specgate.head_vocab is set: the
// projection then holds only the head_vocab most frequent tokens of the
// token_frequency file (FR-Spec; ties by lower id), row r = the r-th of them
// in token-id order (what tools/train/medusa.py's f<L> variants write);
//
// optionally prefixed "medusa_head." (a whole MedusaModel's state dict).
// Any 2-D weight may be stored as I8 with a per-row float scale tensor
// "<name>_scale" [rows] (w = q * scale[row]; specgate's own int8 layout,
// written by QuantizeInt8). On the CPU such a weight runs on the int8
// weight-only kernels with its scales (engine.NewMatI8); its dequantized
// float32 copy is what the device heads upload (as fp16).
// Without the final Linear (the reference's first layout) the heads share the
// base model's lm_head, which is also what LoadOptions.ShareLMHead forces.
// medusa_lm_head.pt (a PyTorch pickle, the reference's other format) is not
// read: Load's error says how to convert it to safetensors.
//
// specgate's own keys live under "specgate" in config.json: share_lm_head,
// token_frequency (a JSON file of per-token counts, for LoadOptions.VocabLimit:
// FR-Spec-style restriction of the heads' vocabulary to the most frequent
// tokens), tree (the default candidate tree, Medusa "choices" paths) and
// nodes (how many of its nodes to use by default), head_vocab (above).
package medusa

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/safetensors"
)

// ErrFormat is wrapped by every error about a malformed heads directory;
// ErrMismatch by a heads directory that does not fit the target model.
var (
	ErrFormat   = errors.New("medusa: bad heads directory")
	ErrMismatch = errors.New("medusa: heads do not fit the target model")
)

// File names in a heads directory.
const (
	ConfigFile  = "config.json"
	WeightsFile = "medusa_lm_head.safetensors"
	PickleFile  = "medusa_lm_head.pt"
)

// Config is a heads directory's config.json.
//
// A Hydra directory's config.json (docs/medusa.md, "Hydra") parses into the
// same struct: NumHeads and NumLayers then hold hydra_num_heads and
// hydra_num_layers (blocks per head, the first one conditioned on the
// path's tokens) and Hydra is true.
type Config struct {
	NumHeads  int    `json:"medusa_num_heads"`
	NumLayers int    `json:"medusa_num_layers"`
	BaseModel string `json:"base_model_name_or_path"`
	// Hydra reports a Hydra heads directory (architectures names
	// HydraModel, or hydra_num_heads is set).
	Hydra bool `json:"-"`
	// Hydra's own keys (the reference's names): architectures,
	// hydra_num_heads, hydra_num_layers, hydra_head_arch ("mlp"),
	// grounded_heads (true: heads read the path's tokens), torch_dtype.
	Architectures  []string `json:"architectures"`
	HydraNumHeads  int      `json:"hydra_num_heads"`
	HydraNumLayers int      `json:"hydra_num_layers"`
	HydraHeadArch  string   `json:"hydra_head_arch"`
	GroundedHeads  *bool    `json:"grounded_heads"`
	TorchDtype     string   `json:"torch_dtype"`
	// HiddenSize and VocabSize are optional; when present they are checked
	// against the target.
	HiddenSize int `json:"hidden_size"`
	VocabSize  int `json:"vocab_size"`
	Specgate   struct {
		ShareLMHead    bool    `json:"share_lm_head"`
		TokenFrequency string  `json:"token_frequency"`
		Tree           [][]int `json:"tree"`
		Nodes          int     `json:"nodes"`
		// HeadVocab > 0: the heads' own projections hold HeadVocab rows,
		// the most frequent tokens of TokenFrequency in id order.
		HeadVocab int `json:"head_vocab"`
		// EmbedDim (Hydra): r, the width of a path token's vector c(x):
		// hydra_embed_proj's rows, or hidden_size without it (0: unchecked).
		EmbedDim int `json:"embed_dim"`
		// Quantization describes how the weights were quantized (free text).
		Quantization string `json:"quantization"`
		// SharedRowsInt8 (Hydra heads sharing the target's lm_head): the
		// CPU heads multiply by those rows quantized to int8 at load
		// (per-row symmetric, as --quantize int8: half the bytes of fp16
		// per head call; logits within the int8 rounding of the fp16 rows').
		// Where it would have no effect (Medusa heads; Hydra heads with
		// their own projections) ParseConfig / Load / Check refuse it.
		SharedRowsInt8 bool `json:"shared_rows_int8"`
	} `json:"specgate"`
}

// LoadOptions tune Load. The zero value loads the heads as saved.
type LoadOptions struct {
	// ShareLMHead uses the target's lm_head as every head's vocabulary
	// projection even when the file has its own (less memory; what heads
	// trained with a frozen shared lm_head need).
	ShareLMHead bool
	// VocabLimit > 0 restricts the heads' candidates to the VocabLimit most
	// frequent tokens of the directory's token_frequency file (FR-Spec):
	// the projection then reads VocabLimit rows instead of the vocabulary.
	VocabLimit int
	// Threads for the heads' matmuls (0 = GOMAXPROCS).
	Threads int
}

// Heads are loaded Medusa heads. Read-only after Load: safe for concurrent
// use.
type Heads struct {
	Config                  Config
	Dir                     string
	NumHeads, Hidden, Vocab int
	// Shared reports whether the heads use the target's lm_head.
	Shared bool

	layers  int
	w       [][]*engine.Mat // [head][layer] W [H][H]
	b       [][][]float32   // [head][layer] bias [H]
	proj    []*engine.Mat   // [head] [rows][H] (shared heads alias one)
	ids     []int32         // proj row r is token ids[r]; nil: row r is token r
	threads int
	// float32 weights for device heads (device.go, deviceWeights): wRaw
	// [head][layer] [H][H]; projRaw per head or one shared ([Rows][H]);
	// projRaw nil with a shared full-vocabulary lm_head. These alias the
	// CPU matrices' own float32 weights; an int8 weight's entry is nil (the
	// CPU keeps only its packed int8 values; deviceWeights dequantizes them
	// from w / proj when a backend takes the heads).
	wRaw    [][][]float32
	projRaw [][]float32
	// hy holds a Hydra directory's own parts (hydra.go); nil for Medusa
	// heads. Hydra heads keep blocks 1..L-1 in w[i][j] and b[i][j] (w[i][0]
	// is nil: block 0 is hy's), their projections in proj.
	hy *hydraParts
}

// IsHydra reports heads loaded from a Hydra directory: heads conditioned
// on the path's tokens (HydraLogits), which never run as Medusa heads
// (Logits) nor on a device.
func (h *Heads) IsHydra() bool { return h.hy != nil }

// Threads is the thread count the heads' CPU matmuls are called with
// (LoadOptions.Threads; 0 = GOMAXPROCS).
func (h *Heads) Threads() int { return h.threads }

// Rows is the number of candidate tokens per head (the vocabulary, or
// VocabLimit).
func (h *Heads) Rows() int {
	if h.ids != nil {
		return len(h.ids)
	}
	return h.Vocab
}

// TokenOf maps a projection row to its token id.
func (h *Heads) TokenOf(row int) int32 {
	if h.ids != nil {
		return h.ids[row]
	}
	return int32(row)
}

// Load reads the heads in dir for target (its hidden size and vocabulary
// are checked; its lm_head is shared when the file has no projection or
// opts.ShareLMHead). Errors name the file and the field or tensor.
func Load(dir string, target *engine.Model, opts LoadOptions) (*Heads, error) {
	cfgPath := filepath.Join(dir, ConfigFile)
	raw, err := os.ReadFile(cfgPath)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrFormat, err)
	}
	cfg, err := ParseConfig(raw, cfgPath)
	if err != nil {
		return nil, err
	}
	H, V := target.Config.HiddenSize, target.Config.VocabSize
	if cfg.HiddenSize != 0 && cfg.HiddenSize != H {
		return nil, fmt.Errorf("%s: hidden_size %d, target hidden_size %d: %w", cfgPath, cfg.HiddenSize, H, ErrMismatch)
	}
	if cfg.VocabSize != 0 && cfg.VocabSize != V {
		return nil, fmt.Errorf("%s: vocab_size %d, target vocab_size %d: %w", cfgPath, cfg.VocabSize, V, ErrMismatch)
	}
	if cfg.Hydra {
		return loadHydra(dir, cfg, target, opts) // hydra.go
	}
	wPath := filepath.Join(dir, WeightsFile)
	if _, err := os.Stat(wPath); errors.Is(err, os.ErrNotExist) {
		if _, perr := os.Stat(filepath.Join(dir, PickleFile)); perr == nil {
			return nil, fmt.Errorf("%s: a PyTorch pickle; specgate reads %s only (convert: python3 -c \"import torch; from safetensors.torch import save_file; "+
				"sd = torch.load('%s', map_location='cpu'); save_file({k: v.contiguous().clone() for k, v in sd.items()}, '%s')\"): %w",
				filepath.Join(dir, PickleFile), WeightsFile, PickleFile, WeightsFile, ErrFormat)
		}
	}
	set, err := safetensors.Open(wPath)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrFormat, err)
	}
	defer set.Close()
	h := &Heads{Config: cfg, Dir: dir, NumHeads: cfg.NumHeads, Hidden: H, Vocab: V, layers: cfg.NumLayers, threads: opts.Threads}

	L := cfg.NumLayers
	names, err := medusaNames(set, wPath, cfgPath, cfg.NumHeads, L)
	if err != nil {
		return nil, err
	}
	rd := &weightReader{set: set, file: wPath, names: names, H: H, V: V, i8: map[string]int8Mat{},
		missing: fmt.Sprintf("%d heads x %d layers in %s", cfg.NumHeads, L, cfgPath)}
	hasOwn, err := medusaLayout(rd, cfg, cfgPath)
	if err != nil {
		return nil, err
	}
	i8, read := rd.i8, rd.read // I8 weights by canonical name (their float values are read's result)
	h.w = make([][]*engine.Mat, cfg.NumHeads)
	h.wRaw = make([][][]float32, cfg.NumHeads)
	h.b = make([][][]float32, cfg.NumHeads)
	h.Shared = !hasOwn || opts.ShareLMHead || cfg.Specgate.ShareLMHead
	if cfg.Specgate.ShareLMHead && hasOwn && !opts.ShareLMHead {
		return nil, fmt.Errorf("%s: specgate.share_lm_head is true but %s has vocabulary projections: %w", cfgPath, wPath, ErrFormat)
	}
	HV := cfg.Specgate.HeadVocab
	if HV > V {
		return nil, fmt.Errorf("%s: specgate.head_vocab %d > target vocab_size %d: %w", cfgPath, HV, V, ErrMismatch)
	}
	projRows := V
	var fileIDs []int32 // projection row r of the file is token fileIDs[r] (nil: r)
	if HV > 0 && !h.Shared {
		projRows = HV
		if fileIDs, err = frequentTokens(dir, cfg, V, HV); err != nil {
			return nil, err
		}
	}
	var full [][]float32
	for i := range cfg.NumHeads {
		for j := range L {
			w, err := read(fmt.Sprintf("%d.%d.linear.weight", i, j), []int64{int64(H), int64(H)})
			if err != nil {
				return nil, err
			}
			b, err := read(fmt.Sprintf("%d.%d.linear.bias", i, j), []int64{int64(H)})
			if err != nil {
				return nil, err
			}
			if q, ok := i8[fmt.Sprintf("%d.%d.linear.weight", i, j)]; ok {
				h.w[i] = append(h.w[i], engine.NewMatI8(q.q, q.scale, H, H)) // int8 kernels: a quarter of the bytes
			} else {
				h.w[i] = append(h.w[i], engine.NewMat(w, H, H))
			}
			h.wRaw[i] = append(h.wRaw[i], w) // nil for int8
			h.b[i] = append(h.b[i], b)
		}
		if !h.Shared {
			p, err := read(fmt.Sprintf("%d.%d.weight", i, L), []int64{int64(projRows), int64(H)})
			if err != nil {
				return nil, err
			}
			full = append(full, p) // nil for int8
		}
	}
	if err := h.setProjections(target, dir, opts, fileIDs, full, func(i int) (int8Mat, bool) {
		q, ok := i8[fmt.Sprintf("%d.%d.weight", i, L)]
		return q, ok
	}); err != nil {
		return nil, err
	}
	return h, nil
}

// medusaNames maps a Medusa weights file's canonical names (without an
// optional "medusa_head." prefix) to the stored ones; every name must be a
// parameter of K heads x L layers ({head}.{layer}.linear.weight/bias,
// {head}.{L}.weight, "_scale" of a weight).
func medusaNames(set *safetensors.File, wPath, cfgPath string, K, L int) (map[string]string, error) {
	return canonicalNames(set, wPath, "medusa_head.", func(c, n string) error {
		head, rest, ok := strings.Cut(c, ".")
		hi, err := strconv.Atoi(head)
		if !ok || err != nil || hi < 0 || hi >= K {
			return fmt.Errorf("%s: tensor %q: not a parameter of %d heads x %d layers (medusa_num_heads in %s): %w", wPath, n, K, L, cfgPath, ErrFormat)
		}
		layer, field, _ := strings.Cut(rest, ".")
		li, err := strconv.Atoi(layer)
		if err == nil && li >= 0 && li < L && field == "linear.bias_scale" {
			return fmt.Errorf("%s: tensor %q: a scale for the vector %q: %s: %w", wPath, n, strings.TrimSuffix(c, "_scale"), int8Only2D, ErrFormat)
		}
		if err != nil || li < 0 || li > L || (li < L && field != "linear.weight" && field != "linear.bias" && field != "linear.weight_scale") ||
			(li == L && field != "weight" && field != "weight_scale") {
			return fmt.Errorf("%s: tensor %q: not a parameter of %d heads x %d layers (medusa_num_layers in %s): %w", wPath, n, K, L, cfgPath, ErrFormat)
		}
		return nil
	})
}

// medusaLayout checks that rd's names (from medusaNames) hold every tensor
// Load reads for cfg's heads: each layer's linear weight and bias, a
// vocabulary projection in every head or in none (and one whenever
// specgate.head_vocab is set), every tensor's dtype (checkDType). Load and
// Check (config check) both call it. It returns whether the heads have
// their own projections.
func medusaLayout(rd *weightReader, cfg Config, cfgPath string) (own bool, err error) {
	K, L := cfg.NumHeads, cfg.NumLayers
	if err := rd.checkDTypes(func(c string) int {
		if strings.HasSuffix(c, ".bias") {
			return 1
		}
		return 2
	}); err != nil {
		return false, err
	}
	if own, err = rd.allOrNone(K, func(i int) string { return fmt.Sprintf("%d.%d.weight", i, L) },
		fmt.Sprintf(`a vocabulary projection ("{head}.%d.weight")`, L)); err != nil {
		return false, err
	}
	for i := range K {
		for j := range L {
			for _, f := range []string{"weight", "bias"} {
				if c := fmt.Sprintf("%d.%d.linear.%s", i, j, f); rd.names[c] == "" {
					return false, fmt.Errorf("%s: tensor %q: missing (%s): %w", rd.file, c, rd.missing, ErrFormat)
				}
			}
		}
	}
	if HV := cfg.Specgate.HeadVocab; HV > 0 && !own {
		return false, fmt.Errorf("%s: specgate.head_vocab %d but %s has no vocabulary projections: %w", cfgPath, HV, rd.file, ErrFormat)
	}
	return own, nil
}

// setProjections sets h.ids and h.proj (and h.projRaw) from the heads'
// own projections full[i] ([file rows][H] float32; nil for an I8 one,
// i8Proj(i)) or, when h.Shared, the target's lm_head: the file's rows are
// the tokens fileIDs (nil: every token), cut to the opts.VocabLimit most
// frequent ones.
func (h *Heads) setProjections(target *engine.Model, dir string, opts LoadOptions, fileIDs []int32, full [][]float32, i8Proj func(int) (int8Mat, bool)) error {
	H, V := h.Hidden, h.Vocab
	projRows := V
	if fileIDs != nil {
		projRows = len(fileIDs)
	}
	if opts.VocabLimit < 0 {
		return fmt.Errorf("medusa: VocabLimit %d < 0: %w", opts.VocabLimit, ErrFormat)
	}
	h.ids = fileIDs
	if opts.VocabLimit > 0 && opts.VocabLimit < projRows {
		// the VocabLimit most frequent tokens are a subset of the file's
		// head_vocab most frequent ones (same order, same ties)
		ids, err := frequentTokens(dir, h.Config, V, opts.VocabLimit)
		if err != nil {
			return err
		}
		h.ids = ids
	}
	// rowOf maps a token id to its row in a stored projection (the target's
	// lm_head: the id itself; a head_vocab projection: its place in fileIDs).
	rowOf := func(id int32, shared bool) int {
		if shared || fileIDs == nil {
			return int(id)
		}
		r, _ := slices.BinarySearch(fileIDs, id) // present: h.ids is a subset of fileIDs
		return r
	}
	rows := func(m []float32, shared bool) []float32 {
		if h.ids == nil || (!shared && len(h.ids) == len(fileIDs)) {
			return m
		}
		out := make([]float32, len(h.ids)*H)
		for r, id := range h.ids {
			src := rowOf(id, shared)
			copy(out[r*H:(r+1)*H], m[src*H:(src+1)*H])
		}
		return out
	}
	h.proj = make([]*engine.Mat, h.NumHeads)
	R := h.Rows()
	if h.Shared {
		lm := target.Weights.LMHead.Float32()
		if len(lm) != V*H {
			return fmt.Errorf("medusa: target lm_head has %d values, want %d x %d: %w", len(lm), V, H, ErrMismatch)
		}
		rl := rows(lm, true)
		p := engine.NewMat(rl, R, H)
		for i := range h.proj {
			h.proj[i] = p
		}
		if h.ids != nil {
			h.projRaw = [][]float32{rl}
		}
	} else {
		for i := range h.proj {
			var r []float32 // nil for int8 (deviceWeights)
			if q, ok := i8Proj(i); ok {
				qr, sr := q.q, q.scale
				if h.ids != nil && len(h.ids) != len(fileIDs) { // a vocabulary limit: the same rows as rows()
					qr, sr = make([]int8, R*H), make([]float32, R)
					for k, id := range h.ids {
						src := rowOf(id, false)
						copy(qr[k*H:(k+1)*H], q.q[src*H:(src+1)*H])
						sr[k] = q.scale[src]
					}
				}
				h.proj[i] = engine.NewMatI8(qr, sr, R, H)
			} else {
				r = rows(full[i], false)
				h.proj[i] = engine.NewMat(r, R, H)
			}
			h.projRaw = append(h.projRaw, r)
		}
	}
	return nil
}

// int8Mat is an I8 weight as stored: q [rows][cols] and one scale per row.
type int8Mat struct {
	q     []int8
	scale []float32
}

// readInt8Rows reads an I8 weight [rows][cols] and its per-row scale
// tensor (F32, F16 or BF16, shape [rows]): the weight is w[r][c] =
// dequant(q[r][c], scale[r]). The CPU heads multiply by q and the scales
// directly.
func readInt8Rows(set *safetensors.File, file, name, scaleName string, shape []int64) ([]int8, []float32, error) {
	sinfo, _ := set.Info(scaleName)
	if !sinfo.DType.Float() || len(sinfo.Shape) != 1 || sinfo.Shape[0] != shape[0] {
		return nil, nil, fmt.Errorf("%s: tensor %q: dtype %s shape %v, want a float vector of %d per-row scales for %q: %w", file, scaleName, sinfo.DType, sinfo.Shape, shape[0], name, ErrFormat)
	}
	scale, _, err := set.ReadFloat32(scaleName)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: tensor %q: %w: %w", file, scaleName, ErrFormat, err)
	}
	q, err := set.ReadRaw(name)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: tensor %q: %w: %w", file, name, ErrFormat, err)
	}
	qi := make([]int8, len(q))
	for i, b := range q {
		qi[i] = int8(b)
	}
	for r, s := range scale {
		if s < 0 || math.IsNaN(float64(s)) || math.IsInf(float64(s), 0) {
			return nil, nil, fmt.Errorf("%s: tensor %q: scale %d is %v (want finite, >= 0): %w", file, scaleName, r, s, ErrFormat)
		}
	}
	return qi, scale, nil
}

// dequant is one int8 weight's value: q times its row's scale, in float32.
func dequant(q int8, scale float32) float32 { return float32(q) * scale }

// dequantRows is an int8 matrix [len(scale)][cols] as float32.
func dequantRows(q []int8, scale []float32, cols int) []float32 {
	out := make([]float32, len(q))
	for i, v := range q {
		out[i] = dequant(v, scale[i/cols])
	}
	return out
}

// deviceWeights returns the heads' weights as a device backend takes them
// (engine.DraftHeads W and Proj): float32 weights as loaded (aliased), int8
// ones dequantized now from the CPU matrices' int8 values (new slices, the
// values Load used to keep: dequant of each value and its row's scale).
func (h *Heads) deviceWeights() (w [][][]float32, proj [][]float32) {
	i8 := func(m *engine.Mat) []float32 {
		q, sc, ok := m.Int8()
		if !ok {
			panic("medusa: a weight without float32 values is not int8")
		}
		return dequantRows(q, sc, m.Cols())
	}
	w = make([][][]float32, len(h.wRaw))
	for i := range h.wRaw {
		w[i] = make([][]float32, len(h.wRaw[i]))
		for j, f := range h.wRaw[i] {
			if f == nil {
				f = i8(h.w[i][j])
			}
			w[i][j] = f
		}
	}
	if h.projRaw != nil {
		proj = make([][]float32, len(h.projRaw))
		for i, f := range h.projRaw {
			if f == nil {
				f = i8(h.proj[i])
			}
			proj[i] = f
		}
	}
	return w, proj
}

func sameShape(a, b []int64) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// ParseConfig parses a heads config.json (file names it in errors).
func ParseConfig(raw []byte, file string) (Config, error) {
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(raw, &probe); err != nil {
		return Config{}, fmt.Errorf("%s: %w: %w", file, ErrFormat, err)
	}
	var c Config
	if err := json.Unmarshal(raw, &c); err != nil {
		return Config{}, fmt.Errorf("%s: %w: %w", file, ErrFormat, err)
	}
	if _, ok := probe["hydra_num_heads"]; ok || slices.Contains(c.Architectures, hydraArch) {
		if err := parseHydraConfig(probe, &c, file); err != nil {
			return Config{}, err
		}
	} else {
		for _, k := range []string{"medusa_num_heads", "medusa_num_layers"} {
			if _, ok := probe[k]; !ok {
				return Config{}, fmt.Errorf("%s: %s: missing: %w", file, k, ErrFormat)
			}
		}
	}
	if !c.Hydra && c.Specgate.SharedRowsInt8 {
		return Config{}, fmt.Errorf("%s: specgate.shared_rows_int8: read for Hydra heads that share the target's lm_head only (Medusa heads multiply by the lm_head rows as loaded): remove the key: %w", file, ErrFormat)
	}
	if c.NumHeads < 1 || c.NumHeads > 64 {
		return Config{}, fmt.Errorf("%s: medusa_num_heads %d: want 1..64: %w", file, c.NumHeads, ErrFormat)
	}
	if c.NumLayers < 0 || c.NumLayers > 16 {
		return Config{}, fmt.Errorf("%s: medusa_num_layers %d: want 0..16: %w", file, c.NumLayers, ErrFormat)
	}
	if c.Specgate.EmbedDim < 0 || c.Specgate.EmbedDim > 1<<16 {
		return Config{}, fmt.Errorf("%s: specgate.embed_dim %d: want 0..65536: %w", file, c.Specgate.EmbedDim, ErrFormat)
	}
	if c.HiddenSize < 0 || c.VocabSize < 0 {
		return Config{}, fmt.Errorf("%s: hidden_size %d / vocab_size %d: want >= 0: %w", file, c.HiddenSize, c.VocabSize, ErrFormat)
	}
	if c.Specgate.HeadVocab < 0 {
		return Config{}, fmt.Errorf("%s: specgate.head_vocab %d: want >= 0: %w", file, c.Specgate.HeadVocab, ErrFormat)
	}
	if c.Specgate.HeadVocab > 0 && c.Specgate.TokenFrequency == "" {
		return Config{}, fmt.Errorf("%s: specgate.head_vocab %d needs specgate.token_frequency (its rows are the most frequent tokens): %w", file, c.Specgate.HeadVocab, ErrFormat)
	}
	if c.Specgate.Tree != nil {
		if _, err := NewTree(c.Specgate.Tree, c.NumHeads); err != nil {
			return Config{}, fmt.Errorf("%s: specgate.tree: %w", file, err)
		}
	}
	if c.Specgate.Nodes < 0 || (c.Specgate.Nodes > 0 && c.Specgate.Nodes > len(c.Specgate.Tree)) {
		return Config{}, fmt.Errorf("%s: specgate.nodes %d: want 0..len(specgate.tree) = %d: %w", file, c.Specgate.Nodes, len(c.Specgate.Tree), ErrFormat)
	}
	return c, nil
}

// frequentTokens returns the limit most frequent token ids (ties by id) of
// the directory's token_frequency file, sorted by id.
func frequentTokens(dir string, cfg Config, V, limit int) ([]int32, error) {
	if cfg.Specgate.TokenFrequency == "" {
		return nil, fmt.Errorf("%s: specgate.token_frequency: missing (needed for a vocabulary limit): %w", filepath.Join(dir, ConfigFile), ErrFormat)
	}
	path := filepath.Join(dir, filepath.Clean("/" + cfg.Specgate.TokenFrequency)[1:])
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrFormat, err)
	}
	var f struct {
		Counts []int64 `json:"counts"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, fmt.Errorf("%s: %w: %w", path, ErrFormat, err)
	}
	if len(f.Counts) != V {
		return nil, fmt.Errorf("%s: counts: %d entries, target vocab_size %d: %w", path, len(f.Counts), V, ErrMismatch)
	}
	if limit < 1 || limit > V {
		// callers check their own limit (specgate.head_vocab, a vocabulary
		// limit, medusaquant's -rows) first; this keeps order[:limit] in range
		return nil, fmt.Errorf("%s: %d most frequent tokens (specgate.head_vocab or the vocabulary limit) of a vocabulary of %d (the counts of %s): want 1..%d: %w", filepath.Join(dir, ConfigFile), limit, V, path, V, ErrFormat)
	}
	order := make([]int32, V)
	for i := range order {
		order[i] = int32(i)
	}
	sort.SliceStable(order, func(a, b int) bool { return f.Counts[order[a]] > f.Counts[order[b]] })
	ids := append([]int32(nil), order[:limit]...)
	sort.Slice(ids, func(a, b int) bool { return ids[a] < ids[b] })
	return ids, nil
}

// Logits computes heads [0, nHeads) on rows hidden rows (hidden is
// [rows][Hidden]) into out, laid out [nHeads][rows][Rows()] (allocated when
// too small; returned).
func (h *Heads) Logits(hidden []float32, rows, nHeads int, out []float32) []float32 {
	if h.hy != nil {
		panic("medusa: Logits on Hydra heads (they read the path's tokens: HydraLogits)")
	}
	if h.Shared && nHeads > 1 {
		return h.logitsShared(hidden, rows, nHeads, out) // heads_cpu.go
	}
	H, R := h.Hidden, h.Rows()
	if len(out) < nHeads*rows*R {
		out = make([]float32, nHeads*rows*R)
	}
	x := make([]float32, rows*H)
	t := make([]float32, rows*H)
	for i := range nHeads {
		copy(x, hidden[:rows*H])
		for j := range h.layers {
			h.resBlock(i, j, x, t, rows)
		}
		h.proj[i].MulT(h.threads, out[i*rows*R:(i+1)*rows*R], x, rows)
	}
	return out[:nHeads*rows*R]
}
