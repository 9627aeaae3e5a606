package model

import (
	"fmt"
	"math"

	"github.com/specgate/specgate/safetensors"
)

// DType is the element type of a weight Tensor.
type DType uint8

// Weight dtypes. I8 is weight-only int8 with one float32 scale per row
// (per output channel of an [out][in] matrix).
const (
	F32 DType = iota + 1
	F16
	BF16
	I8
)

func (d DType) String() string {
	switch d {
	case F32:
		return "F32"
	case F16:
		return "F16"
	case BF16:
		return "BF16"
	case I8:
		return "I8"
	}
	return fmt.Sprintf("DType(%d)", uint8(d))
}

// Size is the bytes per element (I8: without its per-row scales).
func (d DType) Size() int {
	switch d {
	case F32:
		return 4
	case F16, BF16:
		return 2
	case I8:
		return 1
	}
	return 0
}

// Tensor is a typed, row-major weight. Vectors (norms, biases) have Shape
// [n]; matrices are [rows][cols], [out][in] as nn.Linear stores them. The
// data slice named by DType is set, the others are nil:
//
//	F32        F32
//	F16, BF16  Half (the raw binary16 / bfloat16 bits)
//	I8         I8 and Scales, one per row: w[r][c] = float32(I8[r*cols+c]) * Scales[r]
//
// A Tensor's memory is read-only once a backend uses it; backends may keep
// references to it (tied embeddings share one Tensor).
type Tensor struct {
	DType  DType
	Shape  []int
	F32    []float32
	Half   []uint16
	I8     []int8
	Scales []float32
}

// NewF32 wraps data (not copied) as an F32 tensor of shape.
func NewF32(data []float32, shape ...int) Tensor {
	return Tensor{DType: F32, Shape: shape, F32: data}
}

// NewHalf wraps bits (not copied) as an F16 or BF16 tensor of shape.
func NewHalf(dt DType, bits []uint16, shape ...int) Tensor {
	return Tensor{DType: dt, Shape: shape, Half: bits}
}

// NewI8 wraps q and its per-row scales (not copied) as an I8 tensor.
func NewI8(q []int8, scales []float32, shape ...int) Tensor {
	return Tensor{DType: I8, Shape: shape, I8: q, Scales: scales}
}

// IsZero reports a tensor that holds nothing (an absent optional weight,
// such as the QKV bias of an architecture without one).
func (t Tensor) IsZero() bool { return t.DType == 0 && t.Shape == nil }

// Len is the number of elements of the shape.
func (t Tensor) Len() int {
	if len(t.Shape) == 0 {
		return 0
	}
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Cols is the last dimension; Rows the product of the others (1 for a vector).
func (t Tensor) Cols() int {
	if len(t.Shape) == 0 {
		return 0
	}
	return t.Shape[len(t.Shape)-1]
}

// Rows is Len/Cols.
func (t Tensor) Rows() int {
	if c := t.Cols(); c > 0 {
		return t.Len() / c
	}
	return 0
}

// Bytes is the storage size of the data (and scales), in bytes.
func (t Tensor) Bytes() int64 {
	return int64(t.Len())*int64(t.DType.Size()) + 4*int64(len(t.Scales))
}

// Check reports a tensor whose data does not match its dtype and shape.
func (t Tensor) Check() error {
	n := t.Len()
	var got int
	switch t.DType {
	case F32:
		got = len(t.F32)
	case F16, BF16:
		got = len(t.Half)
	case I8:
		got = len(t.I8)
		if len(t.Scales) != t.Rows() {
			return fmt.Errorf("I8 tensor %v: %d scales, want one per row (%d)", t.Shape, len(t.Scales), t.Rows())
		}
	default:
		return fmt.Errorf("tensor %v: dtype %v unsupported", t.Shape, t.DType)
	}
	if got != n {
		return fmt.Errorf("%v tensor %v: %d elements, want %d", t.DType, t.Shape, got, n)
	}
	return nil
}

// At is element i (row-major) as float32.
func (t Tensor) At(i int) float32 {
	switch t.DType {
	case F32:
		return t.F32[i]
	case F16:
		return safetensors.F16ToFloat32(t.Half[i])
	case BF16:
		return safetensors.BF16ToFloat32(t.Half[i])
	case I8:
		return float32(t.I8[i]) * t.Scales[i/t.Cols()]
	}
	panic("model: Tensor.At on " + t.DType.String())
}

// RowInto writes row r as float32 into dst[:Cols()] (widening F16/BF16
// exactly, dequantizing I8).
func (t Tensor) RowInto(dst []float32, r int) {
	c := t.Cols()
	lo := r * c
	dst = dst[:c]
	switch t.DType {
	case F32:
		copy(dst, t.F32[lo:lo+c])
	case F16:
		for i, h := range t.Half[lo : lo+c] {
			dst[i] = safetensors.F16ToFloat32(h)
		}
	case BF16:
		for i, h := range t.Half[lo : lo+c] {
			dst[i] = safetensors.BF16ToFloat32(h)
		}
	case I8:
		s := t.Scales[r]
		for i, q := range t.I8[lo : lo+c] {
			dst[i] = float32(q) * s
		}
	default:
		panic("model: Tensor.RowInto on " + t.DType.String())
	}
}

// Float32 returns the values as float32: F32 tensors return their own slice
// (read-only), other dtypes a new slice.
func (t Tensor) Float32() []float32 {
	if t.DType == F32 {
		return t.F32
	}
	out := make([]float32, t.Len())
	c := t.Cols()
	for r := range t.Rows() {
		t.RowInto(out[r*c:(r+1)*c], r)
	}
	return out
}

// To converts t to dtype dt: F32/F16/BF16 round to nearest even; I8 is
// QuantizeI8. Converting to t's own dtype returns t.
func (t Tensor) To(dt DType) Tensor {
	if dt == t.DType {
		return t
	}
	switch dt {
	case F32:
		return NewF32(t.Float32(), t.Shape...)
	case F16, BF16:
		conv := safetensors.Float32ToF16
		if dt == BF16 {
			conv = safetensors.Float32ToBF16
		}
		f := t.Float32()
		h := make([]uint16, len(f))
		for i, v := range f {
			h[i] = conv(v)
		}
		return NewHalf(dt, h, t.Shape...)
	case I8:
		return QuantizeI8(t)
	}
	panic("model: Tensor.To " + dt.String())
}

// QuantizeI8 quantizes t symmetrically per row: Scales[r] = max|w[r]|/127,
// I8 = round(w/scale) (ties away from zero), so every row's largest
// magnitude maps to ±127. A row of zeros gets scale 0.
func QuantizeI8(t Tensor) Tensor {
	rows, c := t.Rows(), t.Cols()
	q := make([]int8, t.Len())
	scales := make([]float32, rows)
	row := make([]float32, c)
	for r := range rows {
		t.RowInto(row, r)
		var m float32
		for _, v := range row {
			m = max(m, float32(math.Abs(float64(v))))
		}
		if m == 0 {
			continue
		}
		s := m / 127
		scales[r] = s
		for i, v := range row {
			x := math.Round(float64(v / s))
			q[r*c+i] = int8(max(-127, min(127, x)))
		}
	}
	return NewI8(q, scales, t.Shape...)
}
