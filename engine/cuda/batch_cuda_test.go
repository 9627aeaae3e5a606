//go:build cuda

package cuda

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/specgate/specgate/engine"
)

// batchCfg has the 1.1B Llama shape's attention and hidden size (2048
// wide, 32 query / 4 KV heads of 64), so the GEMV shared-memory sizes are
// those of serving (6 tokens x 2048 inputs = 48 KB, the launch that failed
// under concurrency in issue #12), with 2 layers and a small vocabulary so
// that the CPU reference stays fast.
func batchCfg() engine.Config {
	return engine.Config{HiddenSize: 2048, IntermediateSize: 2048, NumLayers: 2, NumHeads: 32, NumKVHeads: 4, HeadDim: 64,
		RMSNormEps: 1e-5, RopeTheta: 10000, RopeScaling: engine.RopeScaling{Type: engine.RopeDefault}, MaxPositions: 1024,
		VocabSize: 1024, BOS: 1, EOS: []int32{2}}
}

// batchSeq is one sequence of the replay: its tokens so far and their slots.
type batchSeq struct {
	n     int
	slots []int32 // all slots it will use, first n filled
	// rounded: some of its cached K/V came from a cuBLAS forward (fp16
	// activations), so even a GEMV step over it differs from the CPU by
	// that rounding.
	rounded bool
}

// TestBatchShapes replays the batch shapes a server produces under
// concurrency against the CPU backend on the same (fp16-rounded) weights:
// decode batches of every size 1..64 (each request at its own context
// length), then mixed batches of prefill chunks and decode tokens. Every
// logits row is compared with the CPU's.
func TestBatchShapes(t *testing.T) { batchShapes(t, "") }

// batchShapes is TestBatchShapes with the GPU's weights quantized as
// quant says (Options.Quantize); the CPU then runs the dequantized weights.
func batchShapes(t *testing.T, quant string) {
	cfg := batchCfg()
	const slots = 8192
	r := rand.New(rand.NewPCG(rand.Uint64(), 12))
	w := engine.RandomWeights(cfg, r.Uint64())
	roundF16(w)
	cw := w
	switch quant {
	case engine.QuantInt8:
		cw = int8Reference(t, cfg, w)
	case QuantInt4:
		cw = int4Reference(t, cfg, w)
	}
	cpu, err := engine.NewCPUBackend(cfg, cw, slots, 0)
	if err != nil {
		t.Fatal(err)
	}
	gpu, err := New(cfg, w, Options{NumSlots: slots, Quantize: quant})
	if err != nil {
		if os.Getenv("SPECGATE_EXPECT_GPU") == "" {
			t.Skipf("no GPU: %v", err)
		}
		t.Fatal(err)
	}
	defer gpu.Close()
	V := cfg.VocabSize
	perm := r.Perm(slots)
	next := 0
	newSeq := func(maxLen int) *batchSeq {
		s := &batchSeq{slots: make([]int32, maxLen)}
		for i := range s.slots {
			s.slots[i] = int32(perm[next])
			next++
		}
		return s
	}
	// req appends k tokens to s (random ids).
	req := func(s *batchSeq, k int) *engine.ForwardRequest {
		toks := make([]int32, k)
		for i := range toks {
			toks[i] = int32(r.IntN(V))
		}
		return &engine.ForwardRequest{CachedSlots: s.slots[:s.n], Tokens: toks, Positions: seq(s.n, k), Slots: s.slots[s.n : s.n+k]}
	}
	check := func(what string, seqs []*batchSeq, reqs []*engine.ForwardRequest) {
		t.Helper()
		T := 0
		gr := make([]*engine.ForwardRequest, len(reqs))
		for i, q := range reqs {
			gr[i] = clone(q)
			T += len(q.Tokens)
		}
		fwd(t, cpu, V, reqs...)
		fwd(t, gpu, V, gr...)
		// GEMV batches (<= 8 tokens) keep fp32 activations; cuBLAS rounds
		// them to fp16, in this forward's logits and in the K/V it caches.
		for i := range reqs {
			tol := 1e-4
			if T > 8 || seqs[i].rounded {
				tol = 5e-3
			}
			if e := rel(gr[i].Logits, reqs[i].Logits); e > tol || e != e {
				t.Fatalf("%s (T=%d): request %d of %d (%d tokens at context %d): logits rel err %.3g > %g",
					what, T, i, len(reqs), len(reqs[i].Tokens), len(reqs[i].CachedSlots), e, tol)
			}
		}
		for i, s := range seqs {
			s.n += len(reqs[i].Tokens)
			s.rounded = s.rounded || T > 8
		}
	}
	// 64 sequences with prompts of 1..16 tokens, prefilled 16 at a time.
	const B = 64
	seqs := make([]*batchSeq, B)
	for i := range seqs {
		seqs[i] = newSeq(16 + B + 16 + 2) // each mixed round picks it at most twice, the long prompt's rounds once
	}
	for b0 := 0; b0 < B; b0 += 16 {
		var reqs []*engine.ForwardRequest
		for _, s := range seqs[b0 : b0+16] {
			reqs = append(reqs, req(s, 1+r.IntN(16)))
		}
		check(fmt.Sprintf("prefill of sequences %d..%d", b0, b0+15), seqs[b0:b0+16], reqs)
	}
	// Decode batches of every size: sequences 0..b-1, one token each.
	for b := 1; b <= B; b++ {
		reqs := make([]*engine.ForwardRequest, b)
		for i := range reqs {
			reqs[i] = req(seqs[i], 1)
		}
		check(fmt.Sprintf("decode batch of %d", b), seqs[:b], reqs)
	}
	// Mixed batches: new prompts (1..40 tokens, some chunked over two
	// steps) beside decode tokens of running sequences, at token counts
	// around the GEMV / cuBLAS boundary and beyond.
	for round, shape := range [][2]int{{1, 1}, {1, 4}, {2, 5}, {1, 7}, {2, 6}, {3, 20}, {2, 40}, {4, 60}} {
		np, nd := shape[0], shape[1]
		var ss []*batchSeq
		var reqs []*engine.ForwardRequest
		for p := 0; p < np; p++ {
			s := newSeq(96)
			k := 1 + r.IntN(max(1, 8-nd))
			if nd > 8 {
				k = 16 + r.IntN(25)
			}
			ss, reqs = append(ss, s), append(reqs, req(s, k))
		}
		for _, i := range r.Perm(B)[:nd] {
			ss, reqs = append(ss, seqs[i]), append(reqs, req(seqs[i], 1))
		}
		check(fmt.Sprintf("mixed round %d (%d prompts, %d decodes)", round, np, nd), ss, reqs)
		// the same prompts' second chunk beside other decodes
		var ss2 []*batchSeq
		var reqs2 []*engine.ForwardRequest
		for _, s := range ss[:np] {
			ss2, reqs2 = append(ss2, s), append(reqs2, req(s, 1+r.IntN(24)))
		}
		for _, i := range r.Perm(B)[:nd] {
			ss2, reqs2 = append(ss2, seqs[i]), append(reqs2, req(seqs[i], 1))
		}
		check(fmt.Sprintf("mixed round %d, second chunks", round), ss2, reqs2)
	}
	// A long prompt in two chunks (the second attends to a 200-token cached
	// prefix: many key tiles in attn_tile) beside decode tokens.
	long := newSeq(360)
	for _, k := range []int{200, 150} {
		ss, reqs := []*batchSeq{long}, []*engine.ForwardRequest{req(long, k)}
		for _, i := range r.Perm(B)[:3] {
			ss, reqs = append(ss, seqs[i]), append(reqs, req(seqs[i], 1))
		}
		check(fmt.Sprintf("long prompt chunk of %d at context %d", k, long.n), ss, reqs)
	}
	g, replays := gpu.Stats()
	t.Logf("batch sizes 1..%d and 8 mixed rounds match the CPU; graphs %d, replays %d", B, g, replays)
}
