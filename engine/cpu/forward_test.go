package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/specgate/specgate/internal/modeltest"
)

// testConfigs are small architectures covering GQA, MQA + tied embeddings,
// both rope scalings, and Qwen2's QKV biases (shared with the other
// package's tests).
func testConfigs() map[string]Config { return modeltest.Configs() }

func TestRopeInvFreqAndRotation(t *testing.T) {
	// head_dim 4, theta 10000: inv_freq = [1, 10000^-0.5 = 0.01].
	c := Config{HeadDim: 4, RopeTheta: 10000, RopeScaling: RopeScaling{Type: RopeDefault}}
	f := RopeInvFreq(c)
	if math.Abs(float64(f[0])-1) > 1e-7 || math.Abs(float64(f[1])-0.01) > 1e-9 {
		t.Fatalf("inv_freq %v, want [1 0.01]", f)
	}
	c.RopeScaling = RopeScaling{Type: RopeLinear, Factor: 2}
	if f := RopeInvFreq(c); math.Abs(float64(f[0])-0.5) > 1e-7 || math.Abs(float64(f[1])-0.005) > 1e-9 {
		t.Fatalf("linear inv_freq %v, want [0.5 0.005]", f)
	}
	// llama3, original 8 positions, low 1, high 4, factor 8: wavelengths
	// 2π (< high_wav 2: no; 2π ≈ 6.28 is between 2 and 8: smoothed) and 200π (> 8: divided).
	c.RopeScaling = RopeScaling{Type: RopeLlama3, Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 8}
	f = RopeInvFreq(c)
	sm := (8/(2*math.Pi) - 1) / 3
	want0 := (1-sm)*1/8 + sm*1
	if math.Abs(float64(f[0])-want0) > 1e-6 || math.Abs(float64(f[1])-0.01/8) > 1e-9 {
		t.Fatalf("llama3 inv_freq %v, want [%v %v]", f, want0, 0.01/8)
	}
	// rotation of x=[1,2,3,4] at position 1 with inv_freq [1, 0.01]:
	// out[0] = 1*cos1 - 3*sin1, out[2] = 3*cos1 + 1*sin1, out[1] = 2cos.01 - 4 sin.01, out[3] = 4cos.01 + 2 sin.01
	cos, sin := make([]float32, 2), make([]float32, 2)
	ropeCosSin(cos, sin, []int32{1}, []float32{1, 0.01})
	x := []float32{1, 2, 3, 4}
	applyRope(x, 1, 4, cos, sin)
	want := []float64{math.Cos(1) - 3*math.Sin(1), 2*math.Cos(.01) - 4*math.Sin(.01), 3*math.Cos(1) + math.Sin(1), 4*math.Cos(.01) + 2*math.Sin(.01)}
	for i := range x {
		if math.Abs(float64(x[i])-want[i]) > 1e-6 {
			t.Fatalf("rope %v, want %v", x, want)
		}
	}
}

func TestRMSNorm(t *testing.T) {
	// x = [3, 4]: mean(x²) = 12.5, eps 0.5 → rsqrt(13) ; w = [1, 2].
	out := make([]float32, 2)
	rmsNorm(out, []float32{3, 4}, []float32{1, 2}, 0.5)
	r := 1 / math.Sqrt(13)
	if math.Abs(float64(out[0])-3*r) > 1e-6 || math.Abs(float64(out[1])-8*r) > 1e-6 {
		t.Fatalf("rmsnorm %v, want [%v %v]", out, 3*r, 8*r)
	}
}

func TestMatmulT(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	for _, sh := range [][3]int{{1, 7, 5}, {5, 33, 17}, {70, 16, 9}, {130, 64, 40}} {
		T, in, out := sh[0], sh[1], sh[2]
		x, w := make([]float32, T*in), make([]float32, out*in)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		for i := range w {
			w[i] = float32(r.NormFloat64())
		}
		y := make([]float32, T*out)
		matmulT(3, y, x, w, T, in, out)
		for tt := range T {
			for o := range out {
				var s float64
				for k := range in {
					s += float64(x[tt*in+k]) * float64(w[o*in+k])
				}
				if math.Abs(s-float64(y[tt*out+o])) > 1e-4*(1+math.Abs(s)) {
					t.Fatalf("shape %v: y[%d][%d] = %v, want %v", sh, tt, o, y[tt*out+o], s)
				}
			}
		}
	}
}
