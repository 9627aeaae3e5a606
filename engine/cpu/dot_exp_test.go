package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestExpKernel: expAVX512 against math.Exp (float64, then rounded) over
// [-110, 88.37] and at the edges: within 2 float32 ulps where the result is
// normal, underflowing to 0 or a tiny denormal below exp's range, 1 at 0;
// above 88.3763 it is clamped (finite, never +Inf).
func TestExpKernel(t *testing.T) {
	if !useAVX512 {
		t.Skip("no AVX-512F")
	}
	r := rand.New(rand.NewPCG(41, 42))
	for _, n := range []int{1, 15, 16, 17, 31, 100, 1000} {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.Float64()*198.37 - 110)
		}
		x[0] = 0
		if n > 5 {
			big := []float32{1e30, 88.3762626647949}
			expAVX512(&big[0], 2)
			if big[0] != big[1] || math.IsInf(float64(big[0]), 0) || big[0] < 2.4e38 {
				t.Fatalf("exp(1e30) = %v, exp(88.3763) = %v: want the same finite clamp", big[0], big[1])
			}
		}
		if n > 3 {
			x[1], x[2], x[3] = -103.9, 88.3, -1e30
		}
		y := append([]float32(nil), x...)
		expAVX512(&y[0], n)
		for i, v := range x {
			want := float32(math.Exp(float64(v)))
			got := y[i]
			switch {
			case v == 0:
				if got != 1 {
					t.Fatalf("exp(0) = %v", got)
				}
			case want < 0x1p-126: // denormal or zero
				if got < 0 || got > 0x1p-125 {
					t.Fatalf("n %d: exp(%v) = %v, want ~%v", n, v, got, want)
				}
			default:
				if ulps := math.Abs(float64(got-want)) / ulp32(want); ulps > 2 {
					t.Fatalf("n %d: exp(%v) = %v, math.Exp %v (%.1f ulps)", n, v, got, want, ulps)
				}
			}
		}
	}
}

// ulp32 is the spacing of float32 values at v.
func ulp32(v float32) float64 {
	return float64(math.Nextafter32(v, float32(math.Inf(1))) - v)
}

// TestSoftmaxSiluKernels: the AVX-512 softmax and SiLU·up kernels against
// float64 references (softmax rows sum to 1; every value within 1e-6
// relative + 1e-7 absolute), for lengths covering the 16-lane tails; a row's
// softmax does not depend on the data around it.
func TestSoftmaxSiluKernels(t *testing.T) {
	if !useAVX512 {
		t.Skip("no AVX-512F")
	}
	r := rand.New(rand.NewPCG(43, 44))
	for _, n := range []int{1, 2, 15, 16, 17, 33, 128, 257, 1024} {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64() * 20)
		}
		const scale = 0.125
		ref := make([]float64, n)
		mx := math.Inf(-1)
		for i, v := range x {
			ref[i] = float64(v) * scale
			mx = math.Max(mx, ref[i])
		}
		var sum float64
		for i := range ref {
			ref[i] = math.Exp(ref[i] - mx)
			sum += ref[i]
		}
		// the row inside a longer buffer: neighbours must not matter
		buf := make([]float32, n+40)
		for i := range buf {
			buf[i] = float32(r.NormFloat64() * 50)
		}
		copy(buf[7:], x)
		y := append([]float32(nil), x...)
		softmaxScaled(y, scale)
		softmaxScaled(buf[7:7+n], scale)
		var s float64
		for i := range y {
			want := ref[i] / sum
			if d := math.Abs(float64(y[i]) - want); d > 1e-6*want+1e-7 {
				t.Fatalf("softmax n %d: [%d] = %v, float64 %v", n, i, y[i], want)
			}
			if buf[7+i] != y[i] {
				t.Fatalf("softmax n %d: [%d] depends on the neighbours: %v vs %v", n, i, buf[7+i], y[i])
			}
			s += float64(y[i])
		}
		if math.Abs(s-1) > 1e-5 {
			t.Fatalf("softmax n %d: sums to %v", n, s)
		}

		g, u := make([]float32, n), make([]float32, n)
		for i := range g {
			g[i], u[i] = float32(r.NormFloat64()*6), float32(r.NormFloat64())
		}
		if n > 2 {
			g[0], g[1] = -200, 200
		}
		want := make([]float64, n)
		for i := range g {
			x := float64(g[i])
			want[i] = x / (1 + math.Exp(-x)) * float64(u[i])
		}
		siluMul(g, u)
		for i := range g {
			if d := math.Abs(float64(g[i]) - want[i]); d > 1e-6*math.Abs(want[i])+1e-7 {
				t.Fatalf("silu n %d: [%d] = %v, float64 %v", n, i, g[i], want[i])
			}
		}
	}
}

// TestAttention512Kernels: the AVX-512 score kernel against float64 dot
// products (head dims 32..128, key counts 1..40 so every partial group
// occurs), and a key's score is the same bits wherever it sits (the slot
// list shifted by 1..5 keys moves it to another group and lane); the value
// kernel equals axpysAVX2 bit for bit.
func TestAttention512Kernels(t *testing.T) {
	if !useAVX512 {
		t.Skip("no AVX-512F")
	}
	r := rand.New(rand.NewPCG(45, 46))
	for _, hd := range []int{32, 64, 96, 128} {
		if !hasAttn512(hd) {
			t.Fatalf("no kernel for head dim %d", hd)
		}
		stride, off := 2*hd+16, hd+16
		kc := make([]float32, 64*stride)
		for i := range kc {
			kc[i] = float32(r.NormFloat64())
		}
		q := make([]float32, hd)
		for i := range q {
			q[i] = float32(r.NormFloat64())
		}
		for n := 1; n <= 40; n++ {
			slots := make([]int32, n+5)
			for i := range slots {
				slots[i] = int32(r.IntN(64))
			}
			got := make([]float32, n+5)
			scores512(&q[0], &kc[off], slots[:n], stride, hd, got)
			for i, s := range slots[:n] {
				k := kc[int(s)*stride+off : int(s)*stride+off+hd]
				var ref, mag float64
				for d := range k {
					ref += float64(q[d]) * float64(k[d])
					mag += math.Abs(float64(q[d]) * float64(k[d]))
				}
				if d := math.Abs(float64(got[i]) - ref); d > float64(hd)*0x1p-23*mag {
					t.Fatalf("hd %d n %d key %d: %v, float64 %v", hd, n, i, got[i], ref)
				}
			}
			for sh := 1; sh <= 5; sh++ {
				moved := make([]float32, n+sh)
				ms := append(append([]int32(nil), slots[n:n+sh]...), slots[:n]...)
				scores512(&q[0], &kc[off], ms, stride, hd, moved)
				for i := range n {
					if math.Float32bits(moved[sh+i]) != math.Float32bits(got[i]) {
						t.Fatalf("hd %d n %d key %d shifted by %d: %v, in place %v", hd, n, i, sh, moved[sh+i], got[i])
					}
				}
			}
			for h := 1; h <= 7; h++ {
				ws := n + 3
				w := make([]float32, h*ws)
				for i := range w {
					w[i] = float32(r.Float64())
				}
				acc, want := make([]float32, h*hd), make([]float32, h*hd)
				for i := range acc {
					acc[i] = float32(i) * 0.25
					want[i] = acc[i]
				}
				values512(acc, &kc[off], slots[:n], w, ws, h, stride, hd)
				for j := range h {
					axpysAVX2(&want[j*hd], &kc[off], &slots[0], &w[j*ws], n, stride, hd)
				}
				for d := range acc {
					if acc[d] != want[d] {
						t.Fatalf("hd %d n %d heads %d: values512[%d] %v, axpysAVX2 %v", hd, n, h, d, acc[d], want[d])
					}
				}
			}
		}
	}
}
