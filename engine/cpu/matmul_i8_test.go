package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

// randI8Matrix draws int8 values in [-127, 127] (both extremes present) and
// positive row scales.
func randI8Matrix(r *rand.Rand, out, in int) ([]int8, []float32) {
	q := make([]int8, out*in)
	for i := range q {
		q[i] = int8(r.IntN(255) - 127)
	}
	q[0], q[len(q)-1] = -127, 127
	s := make([]float32, out)
	for i := range s {
		s[i] = float32((0.5 + r.Float64()) / 127)
	}
	return q, s
}

// TestGemmInt8: the int8 matmul on every kernel path against two
// references. (1) Exact: the packed float32 kernels on the widened values
// float32(q) (exact) give the unscaled sums bit for bit, since the int8
// kernels widen in registers and run the same FMA chain; times the row
// scale in float32 they must equal the int8 result bit for bit. (2) A
// float64 reference of sum_k q*x*scale within the float32 summation
// bound (also for the portable path). Plus batch invariance (each token
// alone gives the same bits) on 1 and 3 threads.
func TestGemmInt8(t *testing.T) {
	type shape struct{ T, in, out int }
	var shapes []shape
	for T := 1; T <= 9; T++ {
		shapes = append(shapes, shape{T, 37, 53}, shape{T, 384, 200})
	}
	shapes = append(shapes, shape{1, 1, 1}, shape{3, 5, 16}, shape{8, 16, 17}, shape{13, 64, 48},
		shape{17, 100, 129}, shape{8, 1024, 384}, shape{2, 7, 300}, shape{25, 40, 33})
	kernelPaths(t, func(t *testing.T) {
		for _, sh := range shapes {
			T, in, out := sh.T, sh.in, sh.out
			rs := rand.New(rand.NewPCG(uint64(T*1000+in), uint64(out)))
			x := make([]float32, T*in)
			for i := range x {
				x[i] = float32(rs.NormFloat64())
			}
			q, sc := randI8Matrix(rs, out, in)
			wq := make([]float32, out*in)
			for i, v := range q {
				wq[i] = float32(v)
			}
			ref, mag := gemmRef(x, wq, T, in, out)
			wm := newWmatI8(q, sc, out, in)
			wf := newWmat(wq, out, in, false)
			for _, threads := range []int{1, 3} {
				y := make([]float32, T*out)
				for i := range y {
					y[i] = float32(math.NaN())
				}
				matmulJobs(fan(threads), x, T, in, mmJob{y, &wm, out})
				if wm.packed() {
					yf := make([]float32, T*out)
					matmulJobs(fan(threads), x, T, in, mmJob{yf, &wf, out})
					for i := range y {
						if want := yf[i] * sc[i%out]; math.Float32bits(y[i]) != math.Float32bits(want) {
							t.Fatalf("shape %v threads %d: out[%d][%d] = %v, float32 kernels on float32(q) times scale %v",
								sh, threads, i/out, i%out, y[i], want)
						}
					}
				}
				for i, v := range y {
					s := float64(sc[i%out])
					tol := (float64(in+2)*0x1p-23*mag[i] + 1e-30) * s * (1 + 0x1p-22)
					if d := math.Abs(float64(v) - ref[i]*s); !(d <= tol) {
						t.Fatalf("shape %v threads %d: out[%d][%d] = %v, float64 %v (|d| %.3g > %.3g)", sh, threads, i/out, i%out, v, ref[i]*s, d, tol)
					}
				}
				for tt := range T {
					y1 := make([]float32, out)
					matmulJobs(fan(threads), x[tt*in:(tt+1)*in], 1, in, mmJob{y1, &wm, out})
					for o := range out {
						if math.Float32bits(y1[o]) != math.Float32bits(y[tt*out+o]) {
							t.Fatalf("shape %v threads %d: token %d row %d: batched %v, alone %v", sh, threads, tt, o, y[tt*out+o], y1[o])
						}
					}
				}
			}
		}
	})
}

// TestGemmInt8KernelVariants calls every generated int8 kernel directly and
// compares it bit for bit with the float32 kernel of the same shape on the
// widened values (and so with every other variant).
func TestGemmInt8KernelVariants(t *testing.T) {
	if !useAVX2 {
		t.Skip("no AVX2+FMA")
	}
	tables := map[string][2]*gemmTable{"256": {&gemmTable256B, &gemmTable256S}}
	if useAVX512 {
		tables["512"] = [2]*gemmTable{&gemmTable512B, &gemmTable512S}
	}
	r := rand.New(rand.NewPCG(41, 42))
	n := 0
	for name, tabs := range tables {
		tb, ts := tabs[0], tabs[1]
		for P := 1; P <= 8; P++ {
			for K := 1; K <= 8; K++ {
				if tb[P][K] == nil {
					continue
				}
				if ts[P][K] == nil {
					t.Fatalf("%s P%dK%d: int8 kernel without a float32 twin", name, P, K)
				}
				n++
				for _, in := range []int{1, 3, 16, 37} {
					out := 16 * P
					q, sc := randI8Matrix(r, out, in)
					wq := make([]float32, len(q))
					for i, v := range q {
						wq[i] = float32(v)
					}
					x := make([]float32, K*in+5)
					for i := range x {
						x[i] = float32(r.NormFloat64())
					}
					wm, wf := newWmatI8(q, sc, out, in), newWmat(wq, out, in, false)
					os := out + 3
					yb, yf := make([]float32, K*os), make([]float32, K*os)
					tb[P][K](wm.i8panelPtr(0), in, &x[0], in, &yb[0], os)
					ts[P][K](wf.panelPtr(0), in, &x[0], in, &yf[0], os)
					for i := range yb {
						if math.Float32bits(yb[i]) != math.Float32bits(yf[i]) {
							t.Fatalf("%sB P%dK%d in %d: out[%d] = %v, float32 kernel %v", name, P, K, in, i, yb[i], yf[i])
						}
					}
				}
			}
		}
	}
	if n < 12 {
		t.Fatalf("%d int8 kernel variants, want at least 12", n)
	}
}
