package model

import (
	"fmt"
	"math"
	"slices"

	"github.com/specgate/specgate/safetensors"
)

// Int4 weight-only, group-wise (issue #15 point 5; the CUDA backend's
// int4 path, engine/cuda/quant.go): each row of an [out][in] matrix is cut
// into groups of I4Group consecutive columns. A group's scale is llama.cpp
// Q4_0's rule: with m the group's value of largest magnitude (the first
// of equals), s = f16(m / -8) (binary16, as the GPU stores it; negative
// when m is positive; +0 for a group of zeros), and its values are
// q = round(w / s) (float32 division, ties away from zero) clamped to
// [-8, 7]: m itself maps to -8 and the other sign reaches +7 (a value
// beyond 7.5 steps is clamped). w ~ s * q. A NaN or infinite weight, or
// a group whose m / -8 overflows binary16 (|m| >= 524160), is an error
// naming its row and column. All 16 levels are used: the step
// is max|w| / 8 (max|w| / 7 with the symmetric [-7, 7], which measured
// 10% worse logits on the shipped target: docs/quantization.md).
// Packed two per byte, row-major: byte j of a row holds column 2j in its
// low nibble and 2j+1 in its high one, each as q + 8 (0..15).

// I4Group is the int4 group size (columns per scale).
const I4Group = 32

// QuantizeI4 quantizes t ([rows][cols], cols a multiple of I4Group) to
// packed int4 values [rows][cols/2] and binary16 group scales
// [rows][cols/I4Group].
func QuantizeI4(t Tensor) (packed []byte, scales []uint16, err error) {
	rows, c := t.Rows(), t.Cols()
	if c <= 0 || c%I4Group != 0 {
		return nil, nil, fmt.Errorf("int4: %d columns, want a multiple of %d: %w", c, I4Group, ErrBadWeights)
	}
	packed = make([]byte, rows*c/2)
	scales = make([]uint16, rows*c/I4Group)
	row := make([]float32, c)
	q := make([]int8, c)
	for r := range rows {
		t.RowInto(row, r)
		for g := 0; g < c/I4Group; g++ {
			grp := row[g*I4Group : (g+1)*I4Group]
			var m, am float32
			for i, v := range grp {
				a := float32(math.Abs(float64(v)))
				if a > math.MaxFloat32 || a != a { // ±Inf, NaN
					return nil, nil, fmt.Errorf("int4: row %d, column %d: weight %v: %w", r, g*I4Group+i, v, ErrBadWeights)
				}
				if a > am {
					m, am = v, a
				}
			}
			var sh uint16
			if am > 0 {
				sh = safetensors.Float32ToF16(m / -8)
			}
			scales[r*c/I4Group+g] = sh
			s := safetensors.F16ToFloat32(sh)
			if math.IsInf(float64(s), 0) {
				i := slices.Index(grp, m)
				return nil, nil, fmt.Errorf("int4: row %d, column %d: weight %v: its group's scale %v/-8 overflows binary16 (|w| < 524160 wanted): %w",
					r, g*I4Group+i, m, m, ErrBadWeights)
			}
			for i, v := range grp {
				x := 0.0
				if s != 0 {
					x = math.Round(float64(v / s))
				}
				q[g*I4Group+i] = int8(max(-8, min(7, x)))
			}
		}
		for j := 0; j < c/2; j++ {
			packed[r*c/2+j] = byte(q[2*j]+8) | byte(q[2*j+1]+8)<<4
		}
	}
	return packed, scales, nil
}

// DequantizeI4 returns the float32 values s * q of packed int4 values and
// their binary16 group scales (QuantizeI4's layout) of a [rows][cols]
// matrix.
func DequantizeI4(packed []byte, scales []uint16, rows, cols int) []float32 {
	out := make([]float32, rows*cols)
	for r := range rows {
		for k := 0; k < cols; k++ {
			b := packed[r*cols/2+k/2]
			if k%2 == 1 {
				b >>= 4
			}
			q := int(b&15) - 8
			out[r*cols+k] = float32(q) * safetensors.F16ToFloat32(scales[r*cols/I4Group+k/I4Group])
		}
	}
	return out
}
