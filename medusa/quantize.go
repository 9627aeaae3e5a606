package medusa

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/specgate/specgate/engine/model"
	"github.com/specgate/specgate/safetensors"
)

// QuantizeInt8 writes the heads directory dir to out with every 2-D weight
// (the blocks' [H][H] and the vocabulary projections; for Hydra heads also
// block 0's [H][H+(i+1)r] and res_connection, but not hydra_embed_proj,
// which is used once at load time; Hydra heads that share the target's
// lm_head get specgate.shared_rows_int8, those rows in int8 at load) stored as I8 with a
// per-row F32 scale tensor "<name>_scale" (symmetric: scale = max|row| / 127,
// q = round(w / scale)); biases keep their dtype. Load reads that layout
// (heads.go). rows > 0 also cuts FR-Spec projections (specgate.head_vocab)
// to the rows most frequent tokens of the directory's token_frequency file
// (what LoadOptions.VocabLimit does at load time) and sets head_vocab to
// rows. config.json (other keys kept) and the token_frequency file are
// copied. It returns the largest |dequantized - original| over all weights
// relative to their row's max |w| (at most 1/254 by construction).
func QuantizeInt8(dir, out string, rows int) (worst float64, err error) {
	cfgPath := filepath.Join(dir, ConfigFile)
	raw, err := os.ReadFile(cfgPath)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrFormat, err)
	}
	cfg, err := ParseConfig(raw, cfgPath)
	if err != nil {
		return 0, err
	}
	var keep []int // projection rows kept (indices into the file's rows); nil: all
	if rows > 0 {
		HV := cfg.Specgate.HeadVocab
		if HV == 0 {
			return 0, fmt.Errorf("%s: rows %d needs FR-Spec projections (specgate.head_vocab): %w", cfgPath, rows, ErrFormat)
		}
		if rows > HV {
			return 0, fmt.Errorf("%s: rows %d > specgate.head_vocab %d: %w", cfgPath, rows, HV, ErrFormat)
		}
		V := cfg.VocabSize
		if V == 0 { // the vocabulary is the frequency file's length
			var f struct {
				Counts []int64 `json:"counts"`
			}
			b, err := os.ReadFile(filepath.Join(dir, filepath.Clean("/" + cfg.Specgate.TokenFrequency)[1:]))
			if err == nil {
				err = json.Unmarshal(b, &f)
			}
			if err != nil {
				return 0, fmt.Errorf("%w: %w", ErrFormat, err)
			}
			V = len(f.Counts)
		}
		if HV > V {
			return 0, fmt.Errorf("%s: specgate.head_vocab %d > the vocabulary's %d tokens (vocab_size, or the counts of %s without it): %w", cfgPath, HV, V, cfg.Specgate.TokenFrequency, ErrFormat)
		}
		all, err := frequentTokens(dir, cfg, V, HV)
		if err != nil {
			return 0, err
		}
		sub, err := frequentTokens(dir, cfg, V, rows)
		if err != nil {
			return 0, err
		}
		for _, id := range sub {
			r, ok := slices.BinarySearch(all, id)
			if !ok {
				return 0, fmt.Errorf("%s: token %d of the %d most frequent is not among the %d: %w", cfgPath, id, rows, HV, ErrFormat)
			}
			keep = append(keep, r)
		}
	}
	wFile := WeightsFile
	if cfg.Hydra {
		wFile = HydraWeightsFile
	}
	// isProj reports a vocabulary projection's weight or (Hydra) bias: the
	// tensors whose rows are the heads' tokens
	isProj := func(n string) bool { return !strings.HasSuffix(n, ".linear.weight") }
	if cfg.Hydra {
		isProj = func(n string) bool { return strings.HasPrefix(strings.TrimPrefix(n, hydraPrefix), "hydra_lm_head.") }
	}
	wPath := filepath.Join(dir, wFile)
	set, err := safetensors.Open(wPath)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrFormat, err)
	}
	defer set.Close()
	var ts []safetensors.Tensor
	for _, n := range set.Names() {
		info, _ := set.Info(n)
		if strings.HasSuffix(n, "_scale") || info.DType == safetensors.I8 {
			return 0, fmt.Errorf("%s: tensor %q: already quantized: %w", wPath, n, ErrFormat)
		}
		if cfg.Hydra && len(info.Shape) == 1 && keep != nil && isProj(n) {
			// a Hydra projection's bias: the kept rows, as F32
			b, _, err := set.ReadFloat32(n)
			if err != nil {
				return 0, fmt.Errorf("%s: tensor %q: %w", wPath, n, err)
			}
			if len(b) != cfg.Specgate.HeadVocab {
				return 0, fmt.Errorf("%s: tensor %q: %d rows, specgate.head_vocab %d: %w", wPath, n, len(b), cfg.Specgate.HeadVocab, ErrFormat)
			}
			cut := make([]float32, 0, len(keep))
			for _, r := range keep {
				cut = append(cut, b[r])
			}
			ts = append(ts, safetensors.Tensor{Name: n, DType: safetensors.F32, Shape: []int64{int64(len(cut))}, Data: safetensors.EncodeF32(cut)})
			continue
		}
		if len(info.Shape) != 2 || strings.TrimPrefix(n, hydraPrefix) == "hydra_embed_proj.weight" {
			// vectors keep their dtype; so does Hydra's token projection
			// (r x H values, used once at load time for every token's c(x))
			b, err := set.ReadRaw(n)
			if err != nil {
				return 0, fmt.Errorf("%s: tensor %q: %w", wPath, n, err)
			}
			ts = append(ts, safetensors.Tensor{Name: n, DType: info.DType, Shape: info.Shape, Data: b})
			continue
		}
		w, shape, err := set.ReadFloat32(n)
		if err != nil {
			return 0, fmt.Errorf("%s: tensor %q: %w", wPath, n, err)
		}
		R, C := int(shape[0]), int(shape[1])
		if keep != nil && isProj(n) {
			if R != cfg.Specgate.HeadVocab {
				return 0, fmt.Errorf("%s: tensor %q: %d rows, specgate.head_vocab %d: %w", wPath, n, R, cfg.Specgate.HeadVocab, ErrFormat)
			}
			cut := make([]float32, 0, len(keep)*C)
			for _, r := range keep {
				cut = append(cut, w[r*C:(r+1)*C]...)
			}
			w, R = cut, len(keep)
		}
		qt := model.QuantizeI8(model.NewF32(w, R, C)) // the engine's own int8 quantizer (--quantize int8)
		q := make([]byte, R*C)
		for i, x := range qt.I8 {
			q[i] = byte(x)
		}
		for r, s := range qt.Scales {
			if s == 0 {
				continue // an all-zero row
			}
			row, m := w[r*C:(r+1)*C], 0.0
			for _, v := range row {
				m = max(m, math.Abs(float64(v)))
			}
			for c, v := range row {
				worst = max(worst, math.Abs(float64(float32(qt.I8[r*C+c])*s-v))/m)
			}
		}
		ts = append(ts, safetensors.Tensor{Name: n, DType: safetensors.I8, Shape: []int64{int64(R), int64(C)}, Data: q},
			safetensors.Tensor{Name: n + "_scale", DType: safetensors.F32, Shape: []int64{int64(R)}, Data: safetensors.EncodeF32(qt.Scales)})
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return 0, err
	}
	if err := safetensors.Write(filepath.Join(out, wFile), ts, map[string]string{"format": "pt", "quantization": "int8 per-row symmetric, scale = max|row|/127"}); err != nil {
		return 0, err
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return 0, fmt.Errorf("%s: %w: %w", cfgPath, ErrFormat, err)
	}
	sg, _ := m["specgate"].(map[string]any)
	if sg == nil {
		sg = map[string]any{}
		m["specgate"] = sg
	}
	if rows > 0 {
		sg["head_vocab"] = rows
	}
	sg["quantization"] = "int8 per-row (weights I8, <name>_scale F32)"
	if cfg.Hydra {
		m["torch_dtype"] = "int8"
		own := false
		for _, n := range set.Names() {
			own = own || isProj(n)
		}
		if !own || cfg.Specgate.ShareLMHead {
			// heads on the target's lm_head rows: those rows in int8 too
			// (at load; Config.Specgate.SharedRowsInt8)
			sg["shared_rows_int8"] = true
		}
	}
	cb, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return 0, err
	}
	if err := os.WriteFile(filepath.Join(out, ConfigFile), append(cb, '\n'), 0o644); err != nil {
		return 0, err
	}
	if tf := cfg.Specgate.TokenFrequency; tf != "" {
		src := filepath.Join(dir, filepath.Clean("/" + tf)[1:])
		b, err := os.ReadFile(src)
		if err != nil {
			return 0, fmt.Errorf("%w: %w", ErrFormat, err)
		}
		if err := os.WriteFile(filepath.Join(out, filepath.Clean("/" + tf)[1:]), b, 0o644); err != nil {
			return 0, err
		}
	}
	return worst, nil
}
