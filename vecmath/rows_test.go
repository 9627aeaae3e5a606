package vecmath

import (
	"math/rand/v2"
	"testing"
)

// rowsRef is DotI8Rows by the portable scalar loop, one row at a time.
func rowsRef(q []int8, arena []int8, stride int, rows []int32) []int32 {
	out := make([]int32, len(rows))
	for k, r := range rows {
		o := int(r) * stride
		for i, x := range q {
			out[k] += int32(x) * int32(arena[o+i])
		}
	}
	return out
}

// TestDotI8Rows: the VNNI kernel (where the CPU has it), the AVX2 path
// and the portable loop give the scalar reference's int32s, for extreme
// values (-128, 127, all -128 rows: the bias correction at its largest),
// random bytes, dims 64 to 1024 and strides longer than the rows, and
// row lists of 0 to 70 rows with repeats.
func TestDotI8Rows(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	hasVNNI, hasAVX2 := useVNNI, useAVX2
	defer func() { useVNNI, useAVX2 = hasVNNI, hasAVX2 }()
	t.Logf("AVX-512 VNNI on this CPU: %v", hasVNNI)
	for _, n := range []int{32, 64, 128, 512, 1024, 96} {
		stride := n + 64*r.IntN(3)
		nrows := 50
		arena := make([]int8, nrows*stride)
		for i := range arena {
			switch i % 7 {
			case 0:
				arena[i] = -128
			case 1:
				arena[i] = 127
			default:
				arena[i] = int8(r.Uint32())
			}
		}
		for i := 0; i < n; i++ { // row 0: all -128
			arena[i] = -128
		}
		q := make([]int8, n)
		for i := range q {
			q[i] = int8(r.Uint32())
		}
		q[0], q[n-1] = -128, 127
		qs := [][]int8{q, make([]int8, n)}
		allMin := make([]int8, n)
		for i := range allMin {
			allMin[i] = -128
		}
		qs = append(qs, allMin)
		for _, q := range qs {
			for _, m := range []int{0, 1, 2, 17, 70} {
				rows := make([]int32, m)
				for k := range rows {
					rows[k] = int32(r.IntN(nrows))
				}
				want := rowsRef(q, arena, stride, rows)
				for _, mode := range []struct {
					name       string
					vnni, avx2 bool
				}{{"vnni", hasVNNI, hasAVX2}, {"avx2", false, hasAVX2}, {"portable", false, false}} {
					useVNNI, useAVX2 = mode.vnni, mode.avx2
					pq := PrepRows(q)
					got := make([]int32, m+1)
					got[m] = 12345
					DotI8Rows(pq, arena, stride, rows, got)
					for k := range want {
						if got[k] != want[k] {
							t.Fatalf("%s: n %d stride %d row %d (%d): got %d, want %d", mode.name, n, stride, k, rows[k], got[k], want[k])
						}
					}
					if got[m] != 12345 {
						t.Fatalf("%s: wrote past len(rows)", mode.name)
					}
				}
			}
		}
	}
}

// TestDotI8RowsBounds: rows outside the arena and a short out panic
// instead of reading or writing out of bounds.
func TestDotI8RowsBounds(t *testing.T) {
	arena := make([]int8, 4*64)
	q := PrepRows(make([]int8, 64))
	for _, tc := range []struct {
		rows []int32
		out  int
	}{{[]int32{4}, 1}, {[]int32{-1}, 1}, {[]int32{0, 1}, 1}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("rows %v out %d: no panic", tc.rows, tc.out)
				}
			}()
			DotI8Rows(q, arena, 64, tc.rows, make([]int32, tc.out))
		}()
	}
}

func BenchmarkDotI8Rows(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	const n, nrows = 512, 1 << 16
	arena := make([]int8, n*nrows)
	for i := range arena {
		arena[i] = int8(r.Uint32())
	}
	q := make([]int8, n)
	for i := range q {
		q[i] = int8(r.Uint32())
	}
	rows := make([]int32, 24)
	out := make([]int32, len(rows))
	hasVNNI := useVNNI
	defer func() { useVNNI = hasVNNI }()
	for _, vnni := range []bool{false, true} {
		if vnni && !hasVNNI {
			continue
		}
		useVNNI = vnni
		pq := PrepRows(q)
		name := map[bool]string{false: "avx2", true: "vnni"}[vnni]
		b.Run(name, func(b *testing.B) {
			for i := range b.N {
				for k := range rows {
					rows[k] = int32((i*7919 + k*104729) % nrows)
				}
				DotI8Rows(pq, arena, n, rows, out)
			}
		})
	}
}
