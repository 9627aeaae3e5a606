package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/specgate/specgate/safetensors"
)

// gemmRef is out[t][o] = sum_k x[t][k]*w[o][k] in float64, with the bound
// sum_k |x[t][k]*w[o][k]| used for the error tolerance.
func gemmRef(x, w []float32, T, in, out int) (ref, mag []float64) {
	ref, mag = make([]float64, T*out), make([]float64, T*out)
	for t := range T {
		for o := range out {
			var s, m float64
			for k := range in {
				p := float64(x[t*in+k]) * float64(w[o*in+k])
				s += p
				m += math.Abs(p)
			}
			ref[t*out+o], mag[t*out+o] = s, m
		}
	}
	return ref, mag
}

// randF16 is a normal sample rounded to binary16 (so the binary16 packing applies).
func randF16(r *rand.Rand) float32 {
	return safetensors.F16ToFloat32(safetensors.Float32ToF16(float32(r.NormFloat64())))
}

// TestGemmReference: the matmul of every kernel path (portable; packed
// AVX2 and AVX-512, binary16 and float32 weights) against a float64
// reference on random shapes with ragged edges: tokens 1..9 and past one
// tile, rows not a multiple of 16 (a partial last panel) nor of a kernel's
// panel count, columns not a multiple of 8 or 16. Every output is within
// a float32 summation bound of the reference (in * 2^-23 * sum |x*w|, the
// bound of a sequential float32 sum of in products, plus slack); the
// packed paths are bit-identical to each other (one FMA chain per output
// whatever kernel computes it), and every token's row equals the token
// computed alone (batch invariance) on 1 and 3 threads.
func TestGemmReference(t *testing.T) {
	type shape struct{ T, in, out int }
	var shapes []shape
	for T := 1; T <= 9; T++ {
		shapes = append(shapes, shape{T, 37, 53}, shape{T, 384, 200})
	}
	shapes = append(shapes, shape{1, 1, 1}, shape{3, 5, 16}, shape{8, 16, 17}, shape{13, 64, 48},
		shape{17, 100, 129}, shape{8, 1024, 384}, shape{2, 7, 300}, shape{25, 40, 33})
	r := rand.New(rand.NewPCG(21, 22))
	packedOut := map[string][]float32{} // shape -> first packed result, for bitwise agreement
	kernelPaths(t, func(t *testing.T) {
		for _, sh := range shapes {
			T, in, out := sh.T, sh.in, sh.out
			x, w := make([]float32, T*in), make([]float32, out*in)
			rs := rand.New(rand.NewPCG(uint64(T*1000+in), uint64(out)))
			for i := range x {
				x[i] = float32(rs.NormFloat64())
			}
			for i := range w {
				w[i] = randF16(rs)
			}
			_ = r
			ref, mag := gemmRef(x, w, T, in, out)
			for _, half := range []bool{false, true} {
				wm := newWmat(w, out, in, half)
				for _, threads := range []int{1, 3} {
					y := make([]float32, T*out)
					for i := range y {
						y[i] = float32(math.NaN()) // every output must be written
					}
					matmulJobs(fan(threads), x, T, in, mmJob{y, &wm, out})
					for i, v := range y {
						tol := float64(in+2)*0x1p-23*mag[i] + 1e-30
						if d := math.Abs(float64(v) - ref[i]); !(d <= tol) {
							t.Fatalf("shape %v half %v threads %d: out[%d][%d] = %v, float64 %v (|d| %.3g > %.3g)",
								sh, half, threads, i/out, i%out, v, ref[i], d, tol)
						}
					}
					if wm.packed() {
						key := fmt.Sprint(sh)
						if prev, ok := packedOut[key]; !ok {
							packedOut[key] = y
						} else {
							for i := range y {
								if math.Float32bits(y[i]) != math.Float32bits(prev[i]) {
									t.Fatalf("shape %v half %v avx512 %v threads %d: out[%d] = %v, another packed path %v",
										sh, half, useAVX512, threads, i, y[i], prev[i])
								}
							}
						}
					}
					for tt := range T {
						y1 := make([]float32, out)
						matmulJobs(fan(threads), x[tt*in:(tt+1)*in], 1, in, mmJob{y1, &wm, out})
						for o := range out {
							if math.Float32bits(y1[o]) != math.Float32bits(y[tt*out+o]) {
								t.Fatalf("shape %v half %v threads %d: token %d row %d: batched %v, alone %v",
									sh, half, threads, tt, o, y[tt*out+o], y1[o])
							}
						}
					}
				}
			}
		}
	})
	if useAVX2 && len(packedOut) != len(shapes) {
		t.Fatalf("packed results for %d of %d shapes", len(packedOut), len(shapes))
	}
}

// TestGemmKernelVariants calls every generated kernel (each panel count P
// and token count K of each table) directly on random panels and compares
// it, bit for bit, with the one-panel one-token kernel of the same table
// and, within the summation bound, with a float64 reference; the binary16
// kernels equal the float32 ones on binary16-exact weights.
func TestGemmKernelVariants(t *testing.T) {
	if !useAVX2 || !hasF16C {
		t.Skip("no AVX2+FMA+F16C")
	}
	tables := map[string]*gemmTable{"256H": &gemmTable256H, "256S": &gemmTable256S}
	if useAVX512 {
		tables["512H"], tables["512S"] = &gemmTable512H, &gemmTable512S
	}
	r := rand.New(rand.NewPCG(31, 32))
	n := 0
	for name, tab := range tables {
		for P := 1; P <= 8; P++ {
			for K := 1; K <= 8; K++ {
				if tab[P][K] == nil {
					continue
				}
				n++
				for _, in := range []int{1, 3, 16, 37} {
					out := 16 * P
					w := make([]float32, out*in)
					for i := range w {
						w[i] = randF16(r)
					}
					x := make([]float32, K*in+5)
					for i := range x {
						x[i] = float32(r.NormFloat64())
					}
					wm := newWmat(w, out, in, name[3] == 'H')
					var ptr = wm.panelPtr(0)
					os := out + 3 // a stride wider than the rows
					y := make([]float32, K*os)
					tab[P][K](ptr, in, &x[0], in, &y[0], os)
					ref, mag := gemmRef(x, w, K, in, out)
					for tt := range K {
						for o := range out {
							v := y[tt*os+o]
							var one [16]float32
							tab[1][1](wm.panelPtr(o/16), in, &x[tt*in], in, &one[0], 16)
							if math.Float32bits(v) != math.Float32bits(one[o%16]) {
								t.Fatalf("%s P%dK%d in %d: out[%d][%d] = %v, P1K1 %v", name, P, K, in, tt, o, v, one[o%16])
							}
							tol := float64(in+2)*0x1p-23*mag[tt*out+o] + 1e-30
							if d := math.Abs(float64(v) - ref[tt*out+o]); !(d <= tol) {
								t.Fatalf("%s P%dK%d in %d: out[%d][%d] = %v, float64 %v", name, P, K, in, tt, o, v, ref[tt*out+o])
							}
						}
						for o := out; o < os; o++ {
							if y[tt*os+o] != 0 {
								t.Fatalf("%s P%dK%d: wrote past the panels at [%d][%d]", name, P, K, tt, o)
							}
						}
					}
				}
			}
		}
	}
	if want := 12; n < want {
		t.Fatalf("%d kernel variants, want at least %d", n, want)
	}
}
