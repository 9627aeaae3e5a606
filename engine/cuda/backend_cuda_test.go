//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/model"
	"github.com/specgate/specgate/kernels"
	"github.com/specgate/specgate/safetensors"
)

// GPU tests: go test -tags cuda ./engine/cuda. The reference is the
// engine's CPU backend run on the same weights rounded to fp16 (what the GPU
// holds), so the remaining differences are summation order and, for prefill
// batches over cuBLAS, fp16 activations.

func configs() map[string]engine.Config {
	base := engine.Config{HiddenSize: 128, IntermediateSize: 344, NumLayers: 3, NumHeads: 4, NumKVHeads: 2, HeadDim: 32,
		RMSNormEps: 1e-5, RopeTheta: 10000, RopeScaling: engine.RopeScaling{Type: engine.RopeDefault}, MaxPositions: 512,
		VocabSize: 517, BOS: 1, EOS: []int32{2}}
	gqa := base
	mha := base
	mha.NumKVHeads = 4
	mha.HeadDim = 64
	mha.HiddenSize = 256
	mqa := base
	mqa.NumKVHeads = 1
	mqa.TieWordEmbeddings = true
	small := base // the engine's own test shape: head_dim 8
	small.HiddenSize, small.IntermediateSize, small.NumHeads, small.NumKVHeads, small.HeadDim = 48, 80, 6, 2, 8
	l3 := base
	l3.RopeTheta = 500000
	l3.RopeScaling = engine.RopeScaling{Type: engine.RopeLlama3, Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 32}
	lin := base
	lin.RopeScaling = engine.RopeScaling{Type: engine.RopeLinear, Factor: 4}
	qw := base // Qwen2: q/k/v biases (the unfused QKV path)
	qw.Arch, qw.QKVBias = "Qwen2ForCausalLM", true
	return map[string]engine.Config{"gqa": gqa, "mha-hd64": mha, "mqa-tied": mqa, "hd8": small, "llama3": l3, "linear": lin, "qwen2-bias": qw}
}

// roundF16 rounds every weight to fp16 (what the GPU stores), leaving
// float32 tensors (F16/BF16 loaded ones are widened first; tied embeddings
// stay one tensor).
func roundF16(w *engine.Weights) {
	tied := w.LMHead.Len() > 0 && &w.LMHead.Shape[0] == &w.Embed.Shape[0]
	r := func(t *model.Tensor) {
		if t.IsZero() {
			return
		}
		v := t.F32
		if t.DType != model.F32 {
			v = t.Float32()
		}
		for i, x := range v {
			v[i] = safetensors.F16ToFloat32(safetensors.Float32ToF16(x))
		}
		*t = model.NewF32(v, t.Shape...)
	}
	r(&w.Embed)
	r(&w.Norm)
	if tied {
		w.LMHead = w.Embed
	} else {
		r(&w.LMHead)
	}
	for i := range w.Layers {
		l := &w.Layers[i]
		for _, t := range []*model.Tensor{&l.AttnNorm, &l.Wq, &l.Wk, &l.Wv, &l.Wo, &l.MLPNorm, &l.WGate, &l.WUp, &l.WDown, &l.Bq, &l.Bk, &l.Bv} {
			r(t)
		}
	}
}

func newPair(t *testing.T, cfg engine.Config, seed uint64, opt Options) (*engine.CPUBackend, *Backend) {
	t.Helper()
	w := engine.RandomWeights(cfg, seed)
	roundF16(w)
	const slots = 2048
	cpu, err := engine.NewCPUBackend(cfg, w, slots, 0)
	if err != nil {
		t.Fatal(err)
	}
	opt.NumSlots = slots
	gpu, err := New(cfg, w, opt)
	if err != nil {
		if os.Getenv("SPECGATE_EXPECT_GPU") == "" {
			t.Skipf("no GPU: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { gpu.Close() })
	return cpu, gpu
}

func rel(a, b []float32) float64 {
	var num, den float64
	for i := range a {
		d := float64(a[i]) - float64(b[i])
		if math.IsNaN(float64(a[i])) {
			return math.Inf(1)
		}
		num += d * d
		den += float64(b[i]) * float64(b[i])
	}
	return math.Sqrt(num / math.Max(den, 1e-300))
}

func argmax(v []float32) int32 {
	b := 0
	for i, x := range v {
		if x > v[b] {
			b = i
		}
	}
	return int32(b)
}

// gap is the distance between the best and second-best logit, relative to the spread.
func gap(v []float32) float64 {
	b := argmax(v)
	second := math.Inf(-1)
	var ss float64
	for i, x := range v {
		ss += float64(x) * float64(x)
		if int32(i) != b {
			second = math.Max(second, float64(x))
		}
	}
	return (float64(v[b]) - second) / math.Sqrt(ss/float64(len(v))+1e-30)
}

func seq(a, n int) []int32 {
	s := make([]int32, n)
	for i := range s {
		s[i] = int32(a + i)
	}
	return s
}

// fwd runs reqs on b with fresh logits buffers (V = vocab size).
func fwd(t *testing.T, b engine.Backend, V int, reqs ...*engine.ForwardRequest) {
	t.Helper()
	for _, r := range reqs {
		rows := len(r.Tokens)
		if r.LogitsRows != nil {
			rows = len(r.LogitsRows)
		}
		r.Logits = make([]float32, rows*V)
	}
	if err := b.Forward(reqs); err != nil {
		t.Fatal(err)
	}
}

func clone(r *engine.ForwardRequest) *engine.ForwardRequest {
	c := *r
	c.Logits = nil
	return &c
}

// Prefill (cuBLAS or chunked GEMV) then graph-replayed decode steps: logits
// close to the CPU backend's, and greedy decoding picks the same tokens
// wherever the CPU's choice is not a near-tie.
func TestForwardMatchesCPU(t *testing.T) {
	for name, cfg := range configs() {
		for _, opt := range []Options{{}, {NoCUBLAS: true}, {NoGraphs: true},
			{NoCUBLAS: true, Tuning: kernels.Tuning{GemvMMA: kernels.GemvMMAOn}}} {
			t.Run(name, func(t *testing.T) {
				r := rand.New(rand.NewPCG(rand.Uint64(), 7))
				cpu, gpu := newPair(t, cfg, r.Uint64(), opt)
				const P = 21
				prompt := make([]int32, P)
				for i := range prompt {
					prompt[i] = int32(r.IntN(cfg.VocabSize))
				}
				slots := r.Perm(2048)[:P+40]
				s32 := func(a, b int) []int32 {
					o := make([]int32, 0, b-a)
					for _, s := range slots[a:b] {
						o = append(o, int32(s))
					}
					return o
				}
				req := &engine.ForwardRequest{Tokens: prompt, Positions: seq(0, P), Slots: s32(0, P)}
				rc, rg := clone(req), clone(req)
				fwd(t, cpu, cfg.VocabSize, rc)
				fwd(t, gpu, cfg.VocabSize, rg)
				// Prefill over cuBLAS rounds activations to fp16; the GEMV
				// path keeps them fp32, unless some projection runs on the
				// tensor-core kernels (fp16 inputs: the same bound as cuBLAS).
				tol := 5e-3
				if opt.NoCUBLAS && !gpu.mmaProjections() {
					tol = 1e-4
				}
				if e := rel(rg.Logits, rc.Logits); e > tol {
					t.Fatalf("prefill logits rel err %.3g > %g", e, tol)
				}
				// Greedy decode, 30 steps, each T=1 (graph path), against CPU.
				next := argmax(rc.Logits[(P-1)*cfg.VocabSize:])
				for step := 0; step < 30; step++ {
					n := P + step
					q := &engine.ForwardRequest{CachedSlots: s32(0, n), Tokens: []int32{next}, Positions: []int32{int32(n)}, Slots: s32(n, n+1)}
					qc, qg := clone(q), clone(q)
					fwd(t, cpu, cfg.VocabSize, qc)
					fwd(t, gpu, cfg.VocabSize, qg)
					if e := rel(qg.Logits, qc.Logits); e > tol {
						t.Fatalf("step %d logits rel err %.3g > %g", step, e, tol)
					}
					a, b := argmax(qc.Logits), argmax(qg.Logits)
					if a != b {
						if gap(qc.Logits) > 10*tol {
							t.Fatalf("step %d: greedy token %d on CPU, %d on GPU (gap %.3g)", step, a, b, gap(qc.Logits))
						}
						t.Logf("step %d: near-tie (gap %.3g), CPU %d GPU %d; stopping", step, gap(qc.Logits), a, b)
						break
					}
					next = a
				}
				if !opt.NoGraphs {
					if g, replays := gpu.Stats(); g == 0 || replays == 0 {
						t.Errorf("graphs %d replays %d: decode did not use CUDA graphs", g, replays)
					}
				}
			})
		}
	}
}

// A token tree verified in one forward gives, for each node, the logits of
// the chain along its root path; batched requests equal separate ones.
func TestTreeEqualsChain(t *testing.T) {
	cfg := configs()["gqa"]
	r := rand.New(rand.NewPCG(rand.Uint64(), 8))
	_, gpu := newPair(t, cfg, r.Uint64(), Options{})
	V := cfg.VocabSize
	const P = 12
	prompt := make([]int32, P)
	for i := range prompt {
		prompt[i] = int32(r.IntN(V))
	}
	pre := &engine.ForwardRequest{Tokens: prompt, Positions: seq(0, P), Slots: seq(0, P), LogitsRows: []int32{P - 1}}
	fwd(t, gpu, cfg.VocabSize, pre)
	parents := []int32{-1, 0, 0, 1, 1, 2, 3}
	tree := make([]int32, len(parents))
	pos := make([]int32, len(parents))
	for i := range tree {
		tree[i] = int32(r.IntN(V))
		if parents[i] < 0 {
			pos[i] = P
		} else {
			pos[i] = pos[parents[i]] + 1
		}
	}
	tr := &engine.ForwardRequest{CachedSlots: seq(0, P), Tokens: tree, Positions: pos, Slots: seq(100, len(tree)), Parents: parents}
	fwd(t, gpu, cfg.VocabSize, tr)
	for i := range tree {
		var path []int32
		for a := int32(i); a >= 0; a = parents[a] {
			path = append([]int32{a}, path...)
		}
		toks := make([]int32, len(path))
		for j, a := range path {
			toks[j] = tree[a]
		}
		ch := &engine.ForwardRequest{CachedSlots: seq(0, P), Tokens: toks, Positions: seq(P, len(toks)),
			Slots: seq(200+10*i, len(toks)), LogitsRows: []int32{int32(len(toks) - 1)}}
		fwd(t, gpu, cfg.VocabSize, ch)
		if e := rel(tr.Logits[i*V:(i+1)*V], ch.Logits); e > 1e-5 {
			t.Errorf("tree node %d: rel err %.3g vs its chain", i, e)
		}
	}
	// Batched = separate: two requests in one Forward.
	a := &engine.ForwardRequest{CachedSlots: seq(0, P), Tokens: tree[:3], Positions: seq(P, 3), Slots: seq(300, 3)}
	b := &engine.ForwardRequest{CachedSlots: seq(0, P), Tokens: tree[3:5], Positions: seq(P, 2), Slots: seq(310, 2), LogitsRows: []int32{1}}
	fwd(t, gpu, cfg.VocabSize, a, b)
	a2, b2 := clone(a), clone(b)
	a2.Slots, b2.Slots = seq(320, 3), seq(330, 2)
	fwd(t, gpu, cfg.VocabSize, a2)
	fwd(t, gpu, cfg.VocabSize, b2)
	if e := rel(a.Logits, a2.Logits); e > 1e-6 {
		t.Errorf("batched request a differs from separate: %.3g", e)
	}
	if e := rel(b.Logits, b2.Logits); e > 1e-6 {
		t.Errorf("batched request b differs from separate: %.3g", e)
	}
}

// CopySlots moves KV exactly as the CPU backend does: after compacting the
// accepted branch of a tree, decoding continues with identical logits.
func TestCopySlotsMatchesCPU(t *testing.T) {
	cfg := configs()["gqa"]
	r := rand.New(rand.NewPCG(rand.Uint64(), 9))
	cpu, gpu := newPair(t, cfg, r.Uint64(), Options{NoCUBLAS: true}) // fp32 activations throughout
	const P = 9
	prompt := make([]int32, P)
	for i := range prompt {
		prompt[i] = int32(r.IntN(cfg.VocabSize))
	}
	parents := []int32{-1, 0, 0, 2, 3}
	toks := []int32{5, 6, 7, 8, 9}
	pos := []int32{P, P + 1, P + 1, P + 2, P + 3}
	for _, b := range []engine.Backend{cpu, gpu} {
		fwd(t, b, cfg.VocabSize, &engine.ForwardRequest{Tokens: prompt, Positions: seq(0, P), Slots: seq(0, P)})
		fwd(t, b, cfg.VocabSize, &engine.ForwardRequest{CachedSlots: seq(0, P), Tokens: toks, Positions: pos, Slots: seq(P, 5), Parents: parents})
		// Accept path 0 -> 2 -> 3: slots P, P+2, P+3 -> P, P+1, P+2 (overlapping).
		if err := b.CopySlots([]int32{P + 2, P + 3}, []int32{P + 1, P + 2}); err != nil {
			t.Fatal(err)
		}
	}
	q := &engine.ForwardRequest{CachedSlots: seq(0, P+3), Tokens: []int32{11}, Positions: []int32{P + 3}, Slots: []int32{P + 3}}
	qc, qg := clone(q), clone(q)
	fwd(t, cpu, cfg.VocabSize, qc)
	fwd(t, gpu, cfg.VocabSize, qg)
	if e := rel(qg.Logits, qc.Logits); e > 1e-4 {
		t.Fatalf("after CopySlots: rel err %.3g", e)
	}
	if err := gpu.CopySlots([]int32{1}, []int32{5000}); err == nil {
		t.Fatal("CopySlots accepted a slot out of range")
	}
}

func TestBadRequests(t *testing.T) {
	cfg := configs()["gqa"]
	_, gpu := newPair(t, cfg, 1, Options{})
	for name, r := range map[string]*engine.ForwardRequest{
		"empty":      {},
		"slots":      {Tokens: []int32{1}, Positions: []int32{0}, Slots: []int32{1 << 20}},
		"token":      {Tokens: []int32{int32(cfg.VocabSize)}, Positions: []int32{0}, Slots: []int32{0}},
		"parents":    {Tokens: []int32{1, 2}, Positions: []int32{0, 1}, Slots: []int32{0, 1}, Parents: []int32{-1, 1}},
		"logitsrows": {Tokens: []int32{1}, Positions: []int32{0}, Slots: []int32{0}, LogitsRows: []int32{1}},
		"lengths":    {Tokens: []int32{1, 2}, Positions: []int32{0}, Slots: []int32{0, 1}},
	} {
		if err := gpu.Forward([]*engine.ForwardRequest{r}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// Models shipped under models/ (HF dirs with config.json): GPU logits of a
// prompt match the CPU backend's.
func TestShippedModels(t *testing.T) {
	dirs, _ := filepath.Glob("../../models/*/config.json")
	if len(dirs) == 0 {
		t.Skip("no models under models/")
	}
	for _, cfgPath := range dirs {
		dir := filepath.Dir(cfgPath)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			if _, err := engine.LoadConfig(dir); errors.Is(err, engine.ErrBadConfig) && strings.Contains(err.Error(), "architectures") {
				t.Skipf("not a Llama model (Medusa heads and the like): %v", err)
			}
			cfg, w := loadModelDir(t, dir)
			roundF16(w)
			cpu, err := engine.NewCPUBackend(cfg, w, 512, 0)
			if err != nil {
				t.Fatal(err)
			}
			gpu, err := New(cfg, w, Options{NumSlots: 512})
			if err != nil {
				t.Fatal(err)
			}
			defer gpu.Close()
			prompt := []int32{1, 450, 4996, 17354, 1701, 432, 17204, 975, 278, 17366, 11203}
			for i := range prompt {
				prompt[i] %= int32(cfg.VocabSize)
			}
			n := len(prompt)
			rc := &engine.ForwardRequest{Tokens: prompt, Positions: seq(0, n), Slots: seq(0, n)}
			rg := clone(rc)
			fwd(t, cpu, cfg.VocabSize, rc)
			fwd(t, gpu, cfg.VocabSize, rg)
			if e := rel(rg.Logits, rc.Logits); e > 1e-3 {
				t.Fatalf("logits rel err %.3g", e)
			}
			t.Logf("%s: logits rel err %.3g", dir, rel(rg.Logits, rc.Logits))
		})
	}
}

// Programmatic dependent launch changes scheduling only: a backend with it
// and one without give the same logits bits for prefill (cuBLAS and chunked
// GEMV), graph-replayed decode steps and a 5-token tree batch; and
// ForwardArgmax (device argmax inside the graph) returns the argmax of the
// logits Forward returns, for several rows across two requests.
func TestPDLAndDeviceArgmax(t *testing.T) {
	cfg := configs()["gqa"]
	V := cfg.VocabSize
	for _, noCUBLAS := range []bool{false, true} {
		_, a := newPair(t, cfg, 11, Options{NoCUBLAS: noCUBLAS})
		_, b := newPair(t, cfg, 11, Options{NoCUBLAS: noCUBLAS, NoPDL: true})
		prompt := seq(5, 40)
		steps := []*engine.ForwardRequest{{Tokens: prompt, Positions: seq(0, 40), Slots: seq(0, 40)}}
		for i := 0; i < 6; i++ {
			n := 40 + i
			steps = append(steps, &engine.ForwardRequest{CachedSlots: seq(0, n), Tokens: []int32{int32(7 * i % V)},
				Positions: []int32{int32(n)}, Slots: []int32{int32(n)}})
		}
		steps = append(steps, &engine.ForwardRequest{CachedSlots: seq(0, 46), Tokens: []int32{3, 9, 4, 11, 12},
			Positions: []int32{46, 47, 47, 48, 48}, Slots: seq(46, 5), Parents: []int32{-1, 0, 0, 1, 2}})
		for si, s := range steps {
			ra, rb := clone(s), clone(s)
			fwd(t, a, V, ra)
			fwd(t, b, V, rb)
			for i := range ra.Logits {
				if math.Float32bits(ra.Logits[i]) != math.Float32bits(rb.Logits[i]) {
					t.Fatalf("noCUBLAS=%v step %d: logit %d with PDL %v, without %v", noCUBLAS, si, i, ra.Logits[i], rb.Logits[i])
				}
			}
		}
		// Two requests, 3 and 2 logits rows, decode-sized (graphed) batch.
		r1 := &engine.ForwardRequest{CachedSlots: seq(0, 46), Tokens: []int32{1, 2, 3}, Positions: seq(46, 3),
			Slots: seq(46, 3)}
		r2 := &engine.ForwardRequest{CachedSlots: seq(0, 20), Tokens: []int32{4, 5, 6}, Positions: seq(20, 3),
			Slots: seq(100, 3), LogitsRows: []int32{2, 0}}
		for rep := 0; rep < 3; rep++ { // eager + capture, then replays
			c1, c2 := clone(r1), clone(r2)
			fwd(t, a, V, c1, c2)
			var want []int32
			for _, c := range []*engine.ForwardRequest{c1, c2} {
				for row := 0; row*V < len(c.Logits); row++ {
					want = append(want, argmax(c.Logits[row*V:(row+1)*V]))
				}
			}
			got := make([]int32, 6)
			got[5] = -7
			if err := a.ForwardArgmax([]*engine.ForwardRequest{clone(r1), clone(r2)}, got); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got[:5]) != fmt.Sprint(want) || got[5] != -7 {
				t.Fatalf("noCUBLAS=%v rep %d: ForwardArgmax %v, want %v (and out[5] untouched)", noCUBLAS, rep, got, want)
			}
		}
		if err := a.ForwardArgmax([]*engine.ForwardRequest{clone(r1)}, make([]int32, 2)); !errors.Is(err, ErrRequest) {
			t.Fatalf("ForwardArgmax with a short out: %v, want ErrRequest", err)
		}
	}
}

// TestDecodeGreedy: multi-step greedy decoding (DecodeGreedy, token fed
// back on the device) gives the tokens of as many single ForwardArgmax
// steps, for calls of 7, 1, 16 and 16 steps in a row (so later calls
// attend to KV the earlier calls wrote), with scattered slots; bad
// arguments are refused.
func TestDecodeGreedy(t *testing.T) {
	type model struct {
		name string
		mk   func() *Backend
	}
	var models []model
	gq := configs()["gqa"]
	models = append(models, model{"random gqa", func() *Backend { _, b := newPair(t, gq, 21, Options{}); return b }})
	if dir := "../../models/specgate-target"; fileExists(dir + "/config.json") {
		cfg, w := loadModelDir(t, dir)
		models = append(models, model{"specgate-target", func() *Backend {
			b, err := New(cfg, w, Options{NumSlots: 512})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			return b
		}})
	}
	const total = 40
	slotOf := func(i int) int32 { return int32(100 + (i*37)%300) } // step i's slot: scattered, distinct
	for _, m := range models {
		ref, multi := m.mk(), m.mk()
		V := ref.cfg.VocabSize
		prompt := seq(3, 12)
		for i := range prompt {
			prompt[i] = int32((int(prompt[i]) * 131) % V)
		}
		pre := func(b *Backend) int32 {
			r := &engine.ForwardRequest{Tokens: prompt, Positions: seq(0, 12), Slots: seq(0, 12), LogitsRows: []int32{11}}
			out := make([]int32, 1)
			if err := b.ForwardArgmax([]*engine.ForwardRequest{r}, out); err != nil {
				t.Fatal(err)
			}
			return out[0]
		}
		t0 := pre(ref)
		if t1 := pre(multi); t1 != t0 {
			t.Fatalf("%s: prefill argmax %d vs %d", m.name, t0, t1)
		}
		cached := seq(0, 12)
		var want []int32
		tok := t0
		for i := 0; i < total; i++ {
			r := &engine.ForwardRequest{CachedSlots: append([]int32(nil), cached...), Tokens: []int32{tok},
				Positions: []int32{int32(12 + i)}, Slots: []int32{slotOf(i)}}
			out := make([]int32, 1)
			if err := ref.ForwardArgmax([]*engine.ForwardRequest{r}, out); err != nil {
				t.Fatal(err)
			}
			cached = append(cached, slotOf(i))
			want = append(want, out[0])
			tok = out[0]
		}
		var got []int32
		cached = seq(0, 12)
		tok = t0
		done := 0
		for _, n := range []int{7, 1, 16, 16} {
			slots := make([]int32, n)
			for i := range slots {
				slots[i] = slotOf(done + i)
			}
			out := make([]int32, n+1)
			out[n] = -5
			if err := multi.DecodeGreedy(tok, int32(12+done), cached, slots, out); err != nil {
				t.Fatal(err)
			}
			if out[n] != -5 {
				t.Fatalf("%s: DecodeGreedy wrote past its %d steps", m.name, n)
			}
			got = append(got, out[:n]...)
			cached = append(cached, slots...)
			tok = out[n-1]
			done += n
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: DecodeGreedy tokens\n%v\nsingle steps\n%v", m.name, got, want)
		}
		t.Logf("%s: %d tokens equal (calls of 7, 1, 16, 16 steps); graphs %d", m.name, total, multi.graphsMade)
		if err := multi.DecodeGreedy(tok, 52, cached, []int32{1, 2}, make([]int32, 1)); !errors.Is(err, ErrRequest) {
			t.Fatalf("short out: %v, want ErrRequest", err)
		}
		if err := multi.DecodeGreedy(tok, 52, cached, make([]int32, MaxDecodeSteps+1), make([]int32, MaxDecodeSteps+1)); !errors.Is(err, ErrRequest) {
			t.Fatalf("too many steps: %v, want ErrRequest", err)
		}
		if err := multi.DecodeGreedy(tok, 52, cached, []int32{400, 1 << 20}, make([]int32, 2)); !errors.Is(err, ErrSlot) {
			t.Fatalf("bad slot: %v, want ErrSlot", err)
		}
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// loadModelDir loads an HF model directory's config and weights.
func loadModelDir(t *testing.T, dir string) (engine.Config, *engine.Weights) {
	t.Helper()
	cfg, err := engine.LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	w, err := engine.LoadWeights(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, w
}

// mmaProjections reports whether any fp16 projection of the model (QKV,
// o_proj, gate/up, down, LM head) runs on the tensor-core kernels
// (kernels.Tuning.GemvMMA): their inputs are rounded to fp16, as cuBLAS
// prefill's are, so tests hold such a backend to the fp16 error bound.
func (b *Backend) mmaProjections() bool {
	cfg := b.cfg
	H, I := cfg.HiddenSize, cfg.IntermediateSize
	for _, s := range [][2]int{{b.qkvDim, H}, {H, cfg.QDim()}, {2 * I, H}, {H, I}, {cfg.VocabSize, H}} {
		if b.dev.UsesMMA(s[0], s[1]) {
			return true
		}
	}
	return false
}
