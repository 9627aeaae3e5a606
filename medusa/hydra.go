package medusa

// Hydra heads (Ankner et al. 2024, "Hydra: Sequentially-Dependent Draft
// Heads for Medusa Decoding"): Medusa heads whose input also holds the
// tokens of the path they extend. Head i predicts x_{i+2} from the hidden
// row h that predicted the pending token x_1 and the tokens x_1..x_{i+1}:
//
//	u = concat(h, c(x_1), ..., c(x_{i+1}))        (H + (i+1) r values)
//	y = R(u) + SiLU(W0 u + b0)                     block 0
//	y = y + SiLU(Wj y + bj)                        blocks j = 1..L-1
//	logits = P y (+ p)                             the head's projection
//
// c(x) = E[x] (the target's input embedding row, r = H) or
// hydra_embed_proj · E[x] (r rows); R(u) = res_connection(u) in the
// reference's layout, h in the compact one (no res_connection). The
// directory format (config.json with architectures ["HydraModel"],
// hydra_lm_head.safetensors) is docs/medusa.md's "Hydra" section.
//
// On the CPU, W0 u is computed as W0[:, :H] h + W0[:, H:] z (z the path's
// token vectors): the first product is shared by every node of a request
// at a depth, so a depth of n nodes costs one H x H product per request and
// n products of H x (i+1) r instead of n products of H x (H + (i+1) r).

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/model"
	"github.com/specgate/specgate/safetensors"
)

// Hydra directory names.
const (
	HydraWeightsFile = "hydra_lm_head.safetensors"
	HydraPickleFile  = "hydra_lm_head.pt"
	// SourceHydra is the Proposal.Source of Hydra trees (per-source stats).
	SourceHydra = "hydra"
	hydraArch   = "HydraModel"
	hydraPrefix = "hydra_head." // a whole HydraModel's state dict
)

// hydraParts are a Hydra directory's parts beyond Medusa's (Heads.hy).
type hydraParts struct {
	r     int           // width of a token vector c(x)
	cTab  []float32     // [V][r] c(x) of every token (hydra_embed_proj · E[x]); nil: E rows
	embed *model.Tensor // the target's input embedding E [V][H]
	// per head: block 0's weight split into the hidden row's columns
	// (w0h [H][H]) and the token vectors' (w0x [H][(i+1) r]), its bias;
	// the reference layout's res_connection split the same way (nil in
	// the compact layout) and its bias (nil: none).
	w0h, w0x []*engine.Mat
	b0       [][]float32
	rh, rx   []*engine.Mat
	rb       [][]float32
	projB    [][]float32 // [head] projection bias over the Rows() rows; nil entries: none
}

// parseHydraConfig checks a Hydra config.json's own keys and sets c's
// NumHeads, NumLayers and Hydra (ParseConfig checks the rest).
func parseHydraConfig(probe map[string]json.RawMessage, c *Config, file string) error {
	if len(c.Architectures) > 0 && !slices.Contains(c.Architectures, hydraArch) {
		return fmt.Errorf("%s: architectures %q: a directory with hydra_num_heads must name %q: %w", file, c.Architectures, hydraArch, ErrFormat)
	}
	for _, k := range []string{"medusa_num_heads", "medusa_num_layers"} {
		if _, ok := probe[k]; ok {
			return fmt.Errorf("%s: %s: a Hydra directory (architectures %q) takes hydra_num_heads and hydra_num_layers, not Medusa's keys: %w", file, k, hydraArch, ErrFormat)
		}
	}
	for _, k := range []string{"hydra_num_heads", "hydra_num_layers"} {
		if _, ok := probe[k]; !ok {
			return fmt.Errorf("%s: %s: missing (a Hydra directory, architectures %q): %w", file, k, hydraArch, ErrFormat)
		}
	}
	if c.HydraNumHeads < 1 || c.HydraNumHeads > 64 {
		return fmt.Errorf("%s: hydra_num_heads %d: want 1..64: %w", file, c.HydraNumHeads, ErrFormat)
	}
	if c.HydraNumLayers < 1 || c.HydraNumLayers > 16 {
		return fmt.Errorf("%s: hydra_num_layers %d: want 1..16 (block 0 is the one that reads the path's tokens): %w", file, c.HydraNumLayers, ErrFormat)
	}
	if c.HydraHeadArch != "" && c.HydraHeadArch != "mlp" {
		return fmt.Errorf("%s: hydra_head_arch %q: only \"mlp\" heads (HydraMLP) are supported: %w", file, c.HydraHeadArch, ErrFormat)
	}
	if c.GroundedHeads != nil && !*c.GroundedHeads {
		return fmt.Errorf("%s: grounded_heads false: ungrounded Hydra heads do not read the path's tokens, i.e. they are Medusa heads (save them as a Medusa directory: medusa_num_heads, medusa_lm_head.safetensors): %w", file, ErrFormat)
	}
	c.Hydra, c.NumHeads, c.NumLayers = true, c.HydraNumHeads, c.HydraNumLayers
	return nil
}

// hydraShape is the shape of the Hydra parameter c (canonical name: no
// "hydra_head." prefix) for K heads of L blocks, hidden size H, token
// vectors of r values and projections of rows rows; ok is false for a name
// that is not a parameter of such heads. A "<weight>_scale" is the per-row
// scale vector of an I8 2-D weight.
func hydraShape(c string, K, L, H, r, rows int) (shape []int64, ok bool) {
	if base, isScale := strings.CutSuffix(c, "_scale"); isScale {
		s, ok := hydraShape(base, K, L, H, r, rows)
		if !ok || len(s) != 2 {
			return nil, false
		}
		return s[:1], true
	}
	h, r64, rows64 := int64(H), int64(r), int64(rows)
	if c == "hydra_embed_proj.weight" {
		return []int64{r64, h}, true
	}
	head := func(s string) (int, string, bool) {
		a, rest, ok := strings.Cut(s, ".")
		i, err := strconv.Atoi(a)
		if !ok || err != nil || i < 0 || i >= K || a != strconv.Itoa(i) {
			return 0, "", false
		}
		return i, rest, true
	}
	if rest, ok := strings.CutPrefix(c, "hydra_lm_head."); ok {
		_, field, ok := head(rest)
		switch {
		case !ok:
			return nil, false
		case field == "weight":
			return []int64{rows64, h}, true
		case field == "bias":
			return []int64{rows64}, true
		}
		return nil, false
	}
	rest, ok := strings.CutPrefix(c, "hydra_mlp.")
	if !ok {
		return nil, false
	}
	i, rest, ok := head(rest)
	if !ok {
		return nil, false
	}
	blk, field, _ := strings.Cut(rest, ".")
	j, err := strconv.Atoi(blk)
	if err != nil || j < 0 || j >= L || blk != strconv.Itoa(j) {
		return nil, false
	}
	in := h
	if j == 0 {
		in = h + int64(i+1)*r64
	}
	switch {
	case field == "linear.weight", j == 0 && field == "res_connection.weight":
		return []int64{h, in}, true
	case field == "linear.bias", j == 0 && field == "res_connection.bias":
		return []int64{h}, true
	}
	return nil, false
}

// hydraNames maps a Hydra weights file's canonical names (without an
// optional "hydra_head." prefix) to the stored ones; every name must be a
// parameter of K heads x L blocks (any sizes).
func hydraNames(set *safetensors.File, wPath, cfgPath string, K, L int) (map[string]string, error) {
	return canonicalNames(set, wPath, hydraPrefix, func(c, n string) error {
		if _, ok := hydraShape(c, K, L, 1, 1, 1); ok {
			return nil
		}
		if base, ok := strings.CutSuffix(c, "_scale"); ok {
			if s, ok := hydraShape(base, K, L, 1, 1, 1); ok && len(s) == 1 {
				return fmt.Errorf("%s: tensor %q: a scale for the vector %q: %s: %w", wPath, n, base, int8Only2D, ErrFormat)
			}
		}
		return fmt.Errorf("%s: tensor %q: not a parameter of %d Hydra heads x %d blocks (hydra_num_heads, hydra_num_layers in %s; names hydra_mlp.{head}.{block}.linear.*, hydra_mlp.{head}.0.res_connection.*, hydra_lm_head.{head}.*, hydra_embed_proj.weight): %w", wPath, n, K, L, cfgPath, ErrFormat)
	})
}

// hydraLayout checks that rd's names (from hydraNames) hold every tensor
// Load reads for K heads x L blocks, in one of the layouts: every head's
// blocks' linear weight and bias; a res_connection in block 0 of every head
// (the reference layout) or of none (the compact one), its bias only with
// it; a vocabulary projection in every head or in none, its bias only with
// it; and dtypes Load reads (weightReader.checkDType). Load and Check (config
// check) both call it, so that the two refuse the same directories. It
// returns whether the heads have res_connections and their own projections.
func hydraLayout(rd *weightReader, K, L int) (res, own bool, err error) {
	if err := rd.checkDTypes(func(c string) int {
		shape, _ := hydraShape(c, K, L, 1, 1, 1)
		return len(shape)
	}); err != nil {
		return false, false, err
	}
	for i := range K {
		for j := range L {
			for _, f := range []string{"weight", "bias"} {
				if c := fmt.Sprintf("hydra_mlp.%d.%d.linear.%s", i, j, f); rd.names[c] == "" {
					return false, false, fmt.Errorf("%s: tensor %q: missing (%s): %w", rd.file, c, rd.missing, ErrFormat)
				}
			}
		}
	}
	if res, err = rd.allOrNone(K, func(i int) string { return fmt.Sprintf("hydra_mlp.%d.0.res_connection.weight", i) },
		"a res_connection in block 0 (all, the reference layout, or none, the compact one)"); err != nil {
		return false, false, err
	}
	if own, err = rd.allOrNone(K, func(i int) string { return fmt.Sprintf("hydra_lm_head.%d.weight", i) },
		`a vocabulary projection ("hydra_lm_head.{head}.weight")`); err != nil {
		return false, false, err
	}
	for i := range K {
		if c := fmt.Sprintf("hydra_mlp.%d.0.res_connection.bias", i); rd.names[c] != "" && !res {
			return false, false, fmt.Errorf("%s: tensor %q: a res_connection bias without its weight: %w", rd.file, rd.names[c], ErrFormat)
		}
		if c := fmt.Sprintf("hydra_lm_head.%d.bias", i); rd.names[c] != "" && !own {
			return false, false, fmt.Errorf("%s: tensor %q: a projection bias without its weight (\"hydra_lm_head.%d.weight\"): %w", rd.file, rd.names[c], i, ErrFormat)
		}
	}
	return res, own, nil
}

// hydraEmbedDim is r: hydra_embed_proj.weight's rows when the file has it
// (its columns must be H, its rows at most H), else H; config.json's specgate.embed_dim, when
// set, must agree.
func hydraEmbedDim(set *safetensors.File, names map[string]string, wPath, cfgPath string, cfg Config, H int) (int, error) {
	r := H
	if n, ok := names["hydra_embed_proj.weight"]; ok {
		info, _ := set.Info(n)
		switch {
		case len(info.Shape) != 2 || info.Shape[0] < 1:
			return 0, fmt.Errorf("%s: tensor %q: shape %v, want [embed_dim, hidden_size %d]: %w", wPath, n, info.Shape, H, ErrFormat)
		case H > 0 && info.Shape[1] != int64(H):
			return 0, fmt.Errorf("%s: tensor %q: shape %v, want [embed_dim, %d] for target hidden_size %d: %w", wPath, n, info.Shape, H, H, ErrMismatch)
		case H > 0 && info.Shape[0] > int64(H):
			// the projection narrows the token vectors (r = H without it);
			// a wider one would only grow Load's [V][r] table of c(x)
			return 0, fmt.Errorf("%s: tensor %q: shape %v: embed_dim %d > hidden_size %d (hydra_embed_proj narrows the embedding rows: want 1..%d rows): %w", wPath, n, info.Shape, info.Shape[0], H, H, ErrFormat)
		case info.Shape[0] > 1<<16:
			// hidden size unknown (config check without a model): the bound of specgate.embed_dim
			return 0, fmt.Errorf("%s: tensor %q: shape %v: embed_dim %d > 65536: %w", wPath, n, info.Shape, info.Shape[0], ErrFormat)
		}
		r = int(info.Shape[0])
	}
	if e := cfg.Specgate.EmbedDim; e != 0 && r != 0 && e != r {
		if _, ok := names["hydra_embed_proj.weight"]; !ok {
			return 0, fmt.Errorf("%s: specgate.embed_dim %d: heads without hydra_embed_proj read the target's embedding rows, r = target hidden_size %d: %w", cfgPath, e, r, ErrMismatch)
		}
		return 0, fmt.Errorf("%s: specgate.embed_dim %d, but %s gives r = %d (hydra_embed_proj.weight's rows, or hidden_size without it): %w", cfgPath, e, wPath, r, ErrFormat)
	}
	return r, nil
}

// openHydraWeights opens dir's hydra_lm_head.safetensors (a pickle in its
// place gets the conversion in its error).
func openHydraWeights(dir string) (*safetensors.File, string, error) {
	wPath := filepath.Join(dir, HydraWeightsFile)
	if _, err := os.Stat(wPath); errors.Is(err, os.ErrNotExist) {
		if _, perr := os.Stat(filepath.Join(dir, HydraPickleFile)); perr == nil {
			return nil, "", fmt.Errorf("%s: a PyTorch pickle; specgate reads %s only (convert: python3 -c \"import torch; from safetensors.torch import save_file; "+
				"sd = torch.load('%s', map_location='cpu'); save_file({k: v.contiguous().clone() for k, v in sd.items()}, '%s')\"): %w",
				filepath.Join(dir, HydraPickleFile), HydraWeightsFile, HydraPickleFile, HydraWeightsFile, ErrFormat)
		}
	}
	set, err := safetensors.Open(wPath)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", ErrFormat, err)
	}
	return set, wPath, nil
}

// loadHydra is Load for a Hydra directory (cfg.Hydra; hidden and vocabulary
// sizes of config.json already checked against target).
func loadHydra(dir string, cfg Config, target *engine.Model, opts LoadOptions) (*Heads, error) {
	cfgPath := filepath.Join(dir, ConfigFile)
	H, V := target.Config.HiddenSize, target.Config.VocabSize
	K, L := cfg.NumHeads, cfg.NumLayers
	if opts.VocabLimit < 0 {
		return nil, fmt.Errorf("medusa: VocabLimit %d < 0: %w", opts.VocabLimit, ErrFormat)
	}
	set, wPath, err := openHydraWeights(dir)
	if err != nil {
		return nil, err
	}
	defer set.Close()
	names, err := hydraNames(set, wPath, cfgPath, K, L)
	if err != nil {
		return nil, err
	}
	r, err := hydraEmbedDim(set, names, wPath, cfgPath, cfg, H)
	if err != nil {
		return nil, err
	}
	E := &target.Weights.Embed
	if E.Rows() != V || E.Cols() != H {
		return nil, fmt.Errorf("medusa: target embed_tokens is %d x %d, want %d x %d: %w", E.Rows(), E.Cols(), V, H, ErrMismatch)
	}
	rd := &weightReader{set: set, file: wPath, names: names, H: H, V: V, i8: map[string]int8Mat{},
		missing: fmt.Sprintf("%d Hydra heads x %d blocks in %s", K, L, cfgPath)}
	hasRes, hasOwn, err := hydraLayout(rd, K, L)
	if err != nil {
		return nil, err
	}
	h := &Heads{Config: cfg, Dir: dir, NumHeads: K, Hidden: H, Vocab: V, layers: L, threads: opts.Threads}
	hy := &hydraParts{r: r, embed: E}
	h.hy = hy

	if _, ok := names["hydra_embed_proj.weight"]; ok {
		p, err := rd.floats("hydra_embed_proj.weight", []int64{int64(r), int64(H)})
		if err != nil {
			return nil, err
		}
		hy.cTab = embedTable(E, engine.NewMat(p, r, H), h.threads)
	}
	// mat reads a 2-D weight as a CPU matrix, split into its first split
	// columns and the rest (split 0: one matrix, second nil).
	mat := func(c string, rows, cols, split int) (*engine.Mat, *engine.Mat, error) {
		w, err := rd.read(c, []int64{int64(rows), int64(cols)})
		if err != nil {
			return nil, nil, err
		}
		if q, ok := rd.i8[c]; ok {
			if split == 0 {
				return engine.NewMatI8(q.q, q.scale, rows, cols), nil, nil
			}
			a, b := splitCols(q.q, rows, cols, split)
			return engine.NewMatI8(a, q.scale, rows, split), engine.NewMatI8(b, q.scale, rows, cols-split), nil
		}
		if split == 0 {
			return engine.NewMat(w, rows, cols), nil, nil
		}
		a, b := splitCols(w, rows, cols, split)
		return engine.NewMat(a, rows, split), engine.NewMat(b, rows, cols-split), nil
	}
	h.w = make([][]*engine.Mat, K)
	h.b = make([][][]float32, K)
	hy.w0h, hy.w0x, hy.b0 = make([]*engine.Mat, K), make([]*engine.Mat, K), make([][]float32, K)
	if hasRes {
		hy.rh, hy.rx, hy.rb = make([]*engine.Mat, K), make([]*engine.Mat, K), make([][]float32, K)
	}
	for i := range K {
		cols := H + (i+1)*r
		if hy.w0h[i], hy.w0x[i], err = mat(fmt.Sprintf("hydra_mlp.%d.0.linear.weight", i), H, cols, H); err != nil {
			return nil, err
		}
		if hy.b0[i], err = rd.read(fmt.Sprintf("hydra_mlp.%d.0.linear.bias", i), []int64{int64(H)}); err != nil {
			return nil, err
		}
		if hasRes {
			if hy.rh[i], hy.rx[i], err = mat(fmt.Sprintf("hydra_mlp.%d.0.res_connection.weight", i), H, cols, H); err != nil {
				return nil, err
			}
			if c := fmt.Sprintf("hydra_mlp.%d.0.res_connection.bias", i); names[c] != "" {
				if hy.rb[i], err = rd.read(c, []int64{int64(H)}); err != nil {
					return nil, err
				}
			}
		}
		h.w[i] = []*engine.Mat{nil}
		h.b[i] = [][]float32{hy.b0[i]}
		for j := 1; j < L; j++ {
			w, _, err := mat(fmt.Sprintf("hydra_mlp.%d.%d.linear.weight", i, j), H, H, 0)
			if err != nil {
				return nil, err
			}
			b, err := rd.read(fmt.Sprintf("hydra_mlp.%d.%d.linear.bias", i, j), []int64{int64(H)})
			if err != nil {
				return nil, err
			}
			h.w[i] = append(h.w[i], w)
			h.b[i] = append(h.b[i], b)
		}
	}

	// projections: every head's own (hydra_lm_head.{i}.weight, optional
	// bias) or none (the target's lm_head)
	h.Shared = !hasOwn || opts.ShareLMHead || cfg.Specgate.ShareLMHead
	if cfg.Specgate.ShareLMHead && hasOwn && !opts.ShareLMHead {
		return nil, fmt.Errorf("%s: specgate.share_lm_head is true but %s has vocabulary projections: %w", cfgPath, wPath, ErrFormat)
	}
	if cfg.Specgate.SharedRowsInt8 && !h.Shared {
		return nil, sharedRowsInt8Unused(cfgPath, wPath)
	}
	HV := cfg.Specgate.HeadVocab
	if HV > V {
		return nil, fmt.Errorf("%s: specgate.head_vocab %d > target vocab_size %d: %w", cfgPath, HV, V, ErrMismatch)
	}
	if HV > 0 && h.Shared {
		// the target's lm_head rows of the head_vocab most frequent tokens
		// (HYDRA-FORMAT.md: "absent (and share_lm_head: true) = the
		// target's lm_head rows (all, or the head_vocab most frequent
		// ones)"): a vocabulary limit of head_vocab, or less
		if opts.VocabLimit == 0 || opts.VocabLimit > HV {
			opts.VocabLimit = HV
		}
	}
	projRows := V
	var fileIDs []int32
	if HV > 0 && !h.Shared {
		projRows = HV
		if fileIDs, err = frequentTokens(dir, cfg, V, HV); err != nil {
			return nil, err
		}
	}
	var full, bias [][]float32
	if !h.Shared {
		for i := range K {
			p, err := rd.read(fmt.Sprintf("hydra_lm_head.%d.weight", i), []int64{int64(projRows), int64(H)})
			if err != nil {
				return nil, err
			}
			full = append(full, p) // nil for int8
			var b []float32
			if c := fmt.Sprintf("hydra_lm_head.%d.bias", i); names[c] != "" {
				if b, err = rd.read(c, []int64{int64(projRows)}); err != nil {
					return nil, err
				}
			}
			bias = append(bias, b)
		}
	}
	if err := h.setProjections(target, dir, opts, fileIDs, full, func(i int) (int8Mat, bool) {
		q, ok := rd.i8[fmt.Sprintf("hydra_lm_head.%d.weight", i)]
		return q, ok
	}); err != nil {
		return nil, err
	}
	if h.Shared && cfg.Specgate.SharedRowsInt8 {
		// the shared rows as int8 for the CPU heads (setProjections kept
		// them as float32 rows: projRaw with a vocabulary limit, else the
		// whole lm_head)
		rows := target.Weights.LMHead.Float32()
		if h.ids != nil {
			rows = h.projRaw[0]
		}
		q := model.QuantizeI8(model.NewF32(rows, h.Rows(), H))
		p := engine.NewMatI8(q.I8, q.Scales, h.Rows(), H)
		for i := range h.proj {
			h.proj[i] = p
		}
	}
	hy.projB = make([][]float32, K)
	for i, b := range bias {
		if b == nil {
			continue
		}
		if h.ids == nil || len(h.ids) == len(fileIDs) {
			hy.projB[i] = b
			continue
		}
		cut := make([]float32, len(h.ids)) // the projection's rows (setProjections' cut)
		for k, id := range h.ids {
			src := int(id)
			if fileIDs != nil {
				src, _ = slices.BinarySearch(fileIDs, id)
			}
			cut[k] = b[src]
		}
		hy.projB[i] = cut
	}
	return h, nil
}

// splitCols splits a row-major [rows][cols] matrix into its first split
// columns and the rest (new slices).
func splitCols[T int8 | float32](w []T, rows, cols, split int) (a, b []T) {
	a, b = make([]T, rows*split), make([]T, rows*(cols-split))
	for o := range rows {
		copy(a[o*split:(o+1)*split], w[o*cols:o*cols+split])
		copy(b[o*(cols-split):(o+1)*(cols-split)], w[o*cols+split:(o+1)*cols])
	}
	return a, b
}

// embedTable is c(x) = P · E[x] for every token x: [V][r].
func embedTable(E *model.Tensor, P *engine.Mat, threads int) []float32 {
	V, H, r := E.Rows(), E.Cols(), P.Rows()
	out := make([]float32, V*r)
	const chunk = 256
	rows := make([]float32, chunk*H)
	for lo := 0; lo < V; lo += chunk {
		n := min(chunk, V-lo)
		for k := range n {
			E.RowInto(rows[k*H:(k+1)*H], lo+k)
		}
		P.MulT(threads, out[lo*r:(lo+n)*r], rows[:n*H], n)
	}
	return out
}

// EmbedDim is a Hydra head's token vector width r (0 for Medusa heads).
func (h *Heads) EmbedDim() int {
	if h.hy == nil {
		return 0
	}
	return h.hy.r
}

// tokenVec writes c(x) (r values) into dst.
func (hy *hydraParts) tokenVec(dst []float32, x int32) {
	if hy.cTab != nil {
		copy(dst[:hy.r], hy.cTab[int(x)*hy.r:(int(x)+1)*hy.r])
		return
	}
	hy.embed.RowInto(dst[:hy.r], int(x))
}

// HydraLogits runs Hydra head i on n = len(row) nodes: node k reads the
// hidden row row[k] of hidden ([rows][Hidden]) and its path's tokens
// toks[k(i+1) : (k+1)(i+1)] (x_1, the pending token, then the tree path
// below it, x_{i+1} last); out is [n][Rows()] (allocated when too small;
// returned). Every token must be in [0, Vocab). The heads must be Hydra
// heads (IsHydra).
func (h *Heads) HydraLogits(i int, hidden []float32, rows int, row []int32, toks []int32, out []float32) []float32 {
	hy := h.hy
	if hy == nil {
		panic("medusa: HydraLogits on Medusa heads")
	}
	H, r, R, n, m := h.Hidden, hy.r, h.Rows(), len(row), i+1
	if len(toks) != n*m {
		panic(fmt.Sprintf("medusa: HydraLogits head %d: %d tokens for %d nodes, want %d", i, len(toks), n, n*m))
	}
	if len(out) < n*R {
		out = make([]float32, n*R)
	}
	out = out[:n*R]
	if n == 0 {
		return out
	}
	th := h.threads
	// the hidden rows' share of block 0, once per row
	a := make([]float32, rows*H)
	hy.w0h[i].MulT(th, a, hidden[:rows*H], rows)
	// the path tokens' share, per node
	z := make([]float32, n*m*r)
	for k, x := range toks {
		hy.tokenVec(z[k*r:(k+1)*r], x)
	}
	t := make([]float32, n*H)
	hy.w0x[i].MulT(th, t, z, n)
	y := make([]float32, n*H)
	var ra []float32
	if hy.rh != nil {
		ra = make([]float32, rows*H)
		hy.rh[i].MulT(th, ra, hidden[:rows*H], rows)
		hy.rx[i].MulT(th, y, z, n)
	}
	for k, q := range row {
		tk, yk := t[k*H:(k+1)*H], y[k*H:(k+1)*H]
		for c, v := range a[int(q)*H : (int(q)+1)*H] {
			tk[c] += v
		}
		if ra == nil {
			copy(yk, hidden[int(q)*H:(int(q)+1)*H]) // R(u) = h
			continue
		}
		for c, v := range ra[int(q)*H : (int(q)+1)*H] {
			yk[c] += v
		}
		if rb := hy.rb[i]; rb != nil {
			for c, v := range rb {
				yk[c] += v
			}
		}
	}
	engine.AddSiLU(y, t, hy.b0[i]) // y = R(u) + SiLU(W0 u + b0)
	for j := 1; j < h.layers; j++ {
		h.w[i][j].ResBlock(th, y, t, h.b[i][j], n)
	}
	h.proj[i].MulT(th, out, y, n)
	if pb := hy.projB[i]; pb != nil {
		for k := range n {
			o := out[k*R : (k+1)*R]
			for c, v := range pb {
				o[c] += v
			}
		}
	}
	return out
}

// checkHydra is Check for a Hydra directory: the weights file's names and
// shapes against hidden and vocab (0 = unknown, then unchecked).
func checkHydra(s Spec, cfg Config, hidden, vocab int) error {
	cfgPath := filepath.Join(s.Heads, ConfigFile)
	set, wPath, err := openHydraWeights(s.Heads)
	if err != nil {
		return err
	}
	defer set.Close()
	K, L := cfg.NumHeads, cfg.NumLayers
	names, err := hydraNames(set, wPath, cfgPath, K, L)
	if err != nil {
		return err
	}
	r, err := hydraEmbedDim(set, names, wPath, cfgPath, cfg, hidden)
	if err != nil {
		return err
	}
	if hidden == 0 {
		r = 0 // unknown: the shapes' hidden-size dimensions are not checked
	}
	rows := vocab
	if cfg.Specgate.HeadVocab > 0 {
		rows = cfg.Specgate.HeadVocab
	}
	for c, n := range names {
		want, _ := hydraShape(c, K, L, hidden, r, rows)
		info, _ := set.Info(n)
		if len(info.Shape) != len(want) {
			return fmt.Errorf("%s: tensor %q: shape %v: %w", wPath, n, info.Shape, ErrFormat)
		}
		for i, d := range want {
			if d > 0 && info.Shape[i] != d {
				return fmt.Errorf("%s: tensor %q: shape %v, want %v (hidden_size %d, vocab_size %d, embed_dim %d): %w", wPath, n, info.Shape, want, hidden, vocab, r, ErrMismatch)
			}
		}
	}
	rd := &weightReader{set: set, file: wPath, names: names, H: hidden, V: vocab,
		missing: fmt.Sprintf("%d Hydra heads x %d blocks in %s", K, L, cfgPath)}
	_, own, err := hydraLayout(rd, K, L)
	if err != nil {
		return err // what Load refuses before reading a value
	}
	if cfg.Specgate.SharedRowsInt8 && own {
		return sharedRowsInt8Unused(cfgPath, wPath) // Load's check (no LoadOptions.ShareLMHead here)
	}
	return checkRows(s, cfg, wPath, vocab, own)
}

// sharedRowsInt8Unused is the error for specgate.shared_rows_int8 on Hydra
// heads with their own projections: no shared rows to quantize.
func sharedRowsInt8Unused(cfgPath, wPath string) error {
	return fmt.Errorf("%s: specgate.shared_rows_int8: %s has the heads' own vocabulary projections (hydra_lm_head.{head}.weight), so there are no shared lm_head rows to quantize (quantize the projections with tools/medusaquant): remove the key: %w", cfgPath, wPath, ErrFormat)
}

// Kind names the kind of the heads directory dir from its config.json:
// "hydra", "medusa", or "" when it does not parse (Check says why).
func Kind(dir string) string {
	p := filepath.Join(dir, ConfigFile)
	raw, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	c, err := ParseConfig(raw, p)
	switch {
	case err != nil:
		return ""
	case c.Hydra:
		return "hydra"
	}
	return "medusa"
}
