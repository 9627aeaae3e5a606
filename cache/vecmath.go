package cache

import "github.com/specgate/specgate/vecmath"

// The cache's vector math lives in package vec (shared with the stores and
// the BERT encoder); these names keep the cache's call sites unchanged.

func dotI8(a, b []int8) int32                  { return vecmath.DotI8(a, b) }
func quantize(v []float32, dst []int8) float32 { return vecmath.QuantizeI8(v, dst) }
func prefetchLines(p *int8, n int)             { vecmath.PrefetchLines(p, n) }
func normalize(v []float32)                    { vecmath.Normalize(v) }

func prepRows(q []int8) vecmath.RowsQuery { return vecmath.PrepRows(q) }
func dotI8Rows(q vecmath.RowsQuery, arena []int8, stride int, rows, out []int32) {
	vecmath.DotI8Rows(q, arena, stride, rows, out)
}
func prepRowsInto(q []int8, u []uint8) vecmath.RowsQuery { return vecmath.PrepRowsInto(q, u) }
