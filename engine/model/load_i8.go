package model

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/specgate/specgate/safetensors"
)

// Int8 checkpoints (written by `specgate quantize`, issue #15 point 5): a
// projection NAME ("....q_proj.weight") quantized to int8 is stored as the
// I8 tensor NAME [out][in] plus the F32 tensor NAME+"_scale" [out] (or
// [out][1], the compressed-tensors layout) holding its per-row scales:
// w[r][c] = float32(q[r][c]) * scale[r]. Other tensors keep their dtype.

// ScaleName is the name of the per-row scale tensor of int8 weight name.
func ScaleName(weight string) string { return weight + "_scale" }

// tensorFile names the file of the set that holds name (for errors).
func tensorFile(set *safetensors.Set, name string) string {
	for _, f := range set.Files() {
		if _, ok := f.Tensors[name]; ok {
			return f.Path
		}
	}
	return set.Dir
}

// readSpec reads the tensor of spec s: an I8 projection with its scales,
// or readTensor's float dtypes. A scale tensor beside a float weight, or
// one of the wrong dtype or shape, is an error.
func readSpec(set *safetensors.Set, s TensorSpec) (Tensor, error) {
	info, ok := set.Info(s.Name)
	sinfo, hasScale := set.Info(ScaleName(s.Name))
	if !ok || info.DType != safetensors.I8 {
		if hasScale {
			return Tensor{}, fmt.Errorf("%s present but the weight is %s, not I8: %w", ScaleName(s.Name), info.DType, ErrBadWeights)
		}
		return readTensor(set, s.Name, s.Shape)
	}
	if !s.Matrix || len(s.Shape) != 2 {
		return Tensor{}, fmt.Errorf("dtype I8 unsupported for this tensor (only projections are int8): %w", ErrBadWeights)
	}
	rows, cols := s.Shape[0], s.Shape[1]
	if len(info.Shape) != 2 || info.Shape[0] != int64(rows) || info.Shape[1] != int64(cols) {
		return Tensor{}, fmt.Errorf("shape %v, want %v: %w", info.Shape, s.Shape, ErrBadWeights)
	}
	if !hasScale {
		return Tensor{}, fmt.Errorf("I8 weight without its scales %q: %w", ScaleName(s.Name), ErrBadWeights)
	}
	if sinfo.DType != safetensors.F32 {
		return Tensor{}, fmt.Errorf("%s (in %s): dtype %s, want F32: %w", ScaleName(s.Name), tensorFile(set, ScaleName(s.Name)), sinfo.DType, ErrBadWeights)
	}
	if !(len(sinfo.Shape) == 1 && sinfo.Shape[0] == int64(rows)) && !(len(sinfo.Shape) == 2 && sinfo.Shape[0] == int64(rows) && sinfo.Shape[1] == 1) {
		return Tensor{}, fmt.Errorf("%s (in %s): shape %v, want [%d]: %w", ScaleName(s.Name), tensorFile(set, ScaleName(s.Name)), sinfo.Shape, rows, ErrBadWeights)
	}
	raw, err := set.ReadRaw(s.Name)
	if err != nil {
		return Tensor{}, fmt.Errorf("%w: %w", ErrBadWeights, err)
	}
	if len(raw) != rows*cols {
		return Tensor{}, fmt.Errorf("%d bytes, want %d: %w", len(raw), rows*cols, ErrBadWeights)
	}
	q := make([]int8, len(raw))
	for i, b := range raw {
		q[i] = int8(b)
	}
	sraw, err := set.ReadRaw(ScaleName(s.Name))
	if err != nil {
		return Tensor{}, fmt.Errorf("%s: %w: %w", ScaleName(s.Name), ErrBadWeights, err)
	}
	if len(sraw) != 4*rows {
		return Tensor{}, fmt.Errorf("%s: %d bytes, want %d: %w", ScaleName(s.Name), len(sraw), 4*rows, ErrBadWeights)
	}
	sc := make([]float32, rows)
	for i := range sc {
		v := math.Float32frombits(binary.LittleEndian.Uint32(sraw[4*i:]))
		if !(v >= 0) || math.IsInf(float64(v), 0) {
			return Tensor{}, fmt.Errorf("%s (in %s): row %d scale %v (want finite, >= 0): %w", ScaleName(s.Name), tensorFile(set, ScaleName(s.Name)), i, v, ErrBadWeights)
		}
		sc[i] = v
	}
	return NewI8(q, sc, rows, cols), nil
}

// encodeSpec is the safetensors form of the tensor of spec s: one tensor,
// or for I8 the int8 values and their scales (ScaleName).
func encodeSpec(s TensorSpec, t Tensor) ([]safetensors.Tensor, error) {
	shape := make([]int64, len(s.Shape))
	for i, d := range s.Shape {
		shape[i] = int64(d)
	}
	if t.DType == I8 {
		if err := t.Check(); err != nil {
			return nil, err
		}
		q := make([]byte, len(t.I8))
		for i, v := range t.I8 {
			q[i] = byte(v)
		}
		return []safetensors.Tensor{{Name: s.Name, DType: safetensors.I8, Shape: shape, Data: q},
			{Name: ScaleName(s.Name), DType: safetensors.F32, Shape: shape[:1], Data: safetensors.EncodeF32(t.Scales)}}, nil
	}
	dt, data, err := t.Encode()
	if err != nil {
		return nil, err
	}
	return []safetensors.Tensor{{Name: s.Name, DType: dt, Shape: shape, Data: data}}, nil
}
