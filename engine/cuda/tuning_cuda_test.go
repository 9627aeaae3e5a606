//go:build cuda

package cuda

import (
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/kernels"
)

// Kernel tuning is per backend: two backends with different tunings run
// side by side on one GPU, each with its own (the environment, set here
// to a third tuning, reaches neither: only Options.WithEnv maps it), and
// the tunings change speed only: fp16 and int8 logits of a prompt and 12
// decode steps are bit for bit equal across them.
func TestTuningPerBackend(t *testing.T) {
	t.Setenv(kernels.EnvGemv, "ring")
	t.Setenv(kernels.EnvGemvWarps, "2")
	alt := kernels.Tuning{Gemv: kernels.GemvDeep, GemvI8: kernels.GemvShallow, GemvWarps: 4, NoAttnPreload: true}
	cfg := int8Configs()["gqa"]
	for _, q := range []string{"", engine.QuantInt8} {
		r := rand.New(rand.NewPCG(rand.Uint64(), 5))
		w := engine.RandomWeights(cfg, r.Uint64())
		roundF16(w)
		a, err := New(cfg, w, Options{NumSlots: 256, Quantize: q})
		if err != nil {
			if os.Getenv("SPECGATE_EXPECT_GPU") == "" {
				t.Skipf("no GPU: %v", err)
			}
			t.Fatal(err)
		}
		defer a.Close()
		b, err := New(cfg, w, Options{NumSlots: 256, Quantize: q, Tuning: alt})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		if ta, tb := a.Tuning(), b.Tuning(); ta.Gemv != kernels.GemvShallow || ta.GemvWarps != 8 || ta.GemvI8 != kernels.GemvI8Hybrid8 ||
			tb.Gemv != kernels.GemvDeep || tb.GemvWarps != 4 || tb.GemvI8 != kernels.GemvShallow || !tb.NoAttnPreload {
			t.Fatalf("tunings %+v / %+v", ta, tb)
		}
		e, err := New(cfg, w, Options{NumSlots: 256, Quantize: q}.WithEnv(os.Getenv))
		if err != nil {
			t.Fatal(err)
		}
		if te := e.Tuning(); te.Gemv != kernels.GemvRing || te.GemvWarps != 2 {
			t.Fatalf("WithEnv(os.Getenv): %+v", te)
		}
		e.Close()
		V := cfg.VocabSize
		const P = 21
		prompt := make([]int32, P)
		for i := range prompt {
			prompt[i] = int32(r.IntN(V))
		}
		same := func(what string, x, y []float32) {
			for i := range x {
				if math.Float32bits(x[i]) != math.Float32bits(y[i]) {
					t.Fatalf("quantize %q, %s: logit %d differs across tunings: %v vs %v", q, what, i, x[i], y[i])
				}
			}
		}
		ra := &engine.ForwardRequest{Tokens: prompt, Positions: seq(0, P), Slots: seq(0, P), LogitsRows: []int32{P - 1}}
		rb := clone(ra)
		fwd(t, a, V, ra)
		fwd(t, b, V, rb)
		same("prefill", ra.Logits, rb.Logits)
		next := argmax(ra.Logits)
		for n := P; n < P+12; n++ {
			qa := &engine.ForwardRequest{CachedSlots: seq(0, n), Tokens: []int32{next}, Positions: []int32{int32(n)}, Slots: seq(n, 1)}
			qb := clone(qa)
			fwd(t, a, V, qa)
			fwd(t, b, V, qb)
			same("decode", qa.Logits, qb.Logits)
			next = argmax(qa.Logits)
		}
	}
}
