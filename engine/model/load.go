package model

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/specgate/specgate/safetensors"
)

// LoadWeights reads the weights of cfg from dir's safetensors files
// (model.safetensors or a sharded index), keeping each tensor in its stored
// dtype (F32, F16 or BF16: nothing is upcast). Every tensor's shape is
// checked against cfg's architecture; a missing, misshapen or unexpected
// tensor is an error naming it.
func LoadWeights(dir string, cfg Config) (*Weights, error) {
	set, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadWeights, err)
	}
	defer set.Close()
	specs := Tensors(cfg)
	known := map[string]bool{}
	for _, s := range specs {
		known[s.Name] = true
		known[ScaleName(s.Name)] = s.Matrix // int8 checkpoints (load_i8.go)
	}
	arch := cfg.Arch
	if arch == "" {
		arch = Llama.Name
	}
	for _, n := range set.Names() {
		if known[n] || strings.HasSuffix(n, "rotary_emb.inv_freq") || (cfg.TieWordEmbeddings && n == "lm_head.weight") {
			continue
		}
		return nil, fmt.Errorf("%s: tensor %q: unexpected for %s with %d layers: %w", tensorFile(set, n), n, arch, cfg.NumLayers, ErrBadWeights)
	}
	w := NewWeights(cfg)
	for _, s := range specs {
		t, err := readSpec(set, s)
		if err != nil {
			return nil, fmt.Errorf("%s: tensor %q: %w", tensorFile(set, s.Name), s.Name, err)
		}
		*s.Field(w) = t
	}
	if cfg.TieWordEmbeddings {
		w.LMHead = w.Embed
	}
	return w, nil
}

func readTensor(set *safetensors.Set, name string, shape []int) (Tensor, error) {
	info, ok := set.Info(name)
	if !ok {
		return Tensor{}, fmt.Errorf("missing: %w", ErrBadWeights)
	}
	if !info.DType.Float() {
		return Tensor{}, fmt.Errorf("dtype %s unsupported (want F32, F16 or BF16): %w", info.DType, ErrBadWeights)
	}
	if len(info.Shape) != len(shape) {
		return Tensor{}, fmt.Errorf("shape %v, want %v: %w", info.Shape, shape, ErrBadWeights)
	}
	for i := range shape {
		if info.Shape[i] != int64(shape[i]) {
			return Tensor{}, fmt.Errorf("shape %v, want %v: %w", info.Shape, shape, ErrBadWeights)
		}
	}
	raw, err := set.ReadRaw(name)
	if err != nil {
		return Tensor{}, fmt.Errorf("%w: %w", ErrBadWeights, err)
	}
	n := prod(shape)
	if len(raw) != n*info.DType.Size() {
		return Tensor{}, fmt.Errorf("%d bytes, want %d: %w", len(raw), n*info.DType.Size(), ErrBadWeights)
	}
	switch info.DType {
	case safetensors.F32:
		v := make([]float32, n)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		return NewF32(v, shape...), nil
	default: // F16, BF16
		h := make([]uint16, n)
		for i := range h {
			h[i] = binary.LittleEndian.Uint16(raw[2*i:])
		}
		dt := F16
		if info.DType == safetensors.BF16 {
			dt = BF16
		}
		return NewHalf(dt, h, shape...), nil
	}
}

// Encode returns t in safetensors form (dtype and little-endian bytes).
// I8 tensors have no single-tensor safetensors form (their scales are a
// second tensor): Encode rejects them.
func (t Tensor) Encode() (safetensors.DType, []byte, error) {
	switch t.DType {
	case F32:
		return safetensors.F32, safetensors.EncodeF32(t.F32), nil
	case F16, BF16:
		b := make([]byte, 2*len(t.Half))
		for i, h := range t.Half {
			binary.LittleEndian.PutUint16(b[2*i:], h)
		}
		if t.DType == BF16 {
			return safetensors.BF16, b, nil
		}
		return safetensors.F16, b, nil
	}
	return "", nil, fmt.Errorf("encode %v tensor: unsupported", t.DType)
}

// Save writes config.json and model.safetensors of cfg and w into dir
// (created if needed), in the HF layout Load reads back, each tensor in its
// own dtype.
func Save(dir string, cfg Config, w *Weights) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if len(w.Layers) > 0 { // torch_dtype names the dtype the matrices are stored in
		cfg.DType = map[DType]string{F32: "float32", F16: "float16", BF16: "bfloat16"}[w.Layers[0].Wq.DType]
	}
	cj, err := cfg.ConfigJSON()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cj, 0o644); err != nil {
		return err
	}
	var ts []safetensors.Tensor
	for _, s := range Tensors(cfg) {
		enc, err := encodeSpec(s, *s.Field(w)) // I8: values and scales (load_i8.go)
		if err != nil {
			return fmt.Errorf("%s: %w", s.Name, err)
		}
		ts = append(ts, enc...)
	}
	return safetensors.Write(filepath.Join(dir, safetensors.SingleFileName), ts, map[string]string{"format": "pt"})
}
