package engine

import "github.com/specgate/specgate/engine/cpu"

// NewMatI8 prepares an int8 weight-only matrix with per-row scales for the
// CPU matmul (see cpu.NewMatI8).
func NewMatI8(q []int8, scale []float32, out, in int) *Mat { return cpu.NewMatI8(q, scale, out, in) }
