package engine

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/specgate/specgate/engine/model"
	"github.com/specgate/specgate/internal/modeltest"
)

// testConfigs are small architectures covering GQA, MQA + tied embeddings,
// both rope scalings, and Qwen2's QKV biases (shared with the other
// package's tests).
func testConfigs() map[string]Config { return modeltest.Configs() }

// refInvFreq is the HF formula in float64, written independently of RopeInvFreq.
func refInvFreq(c Config) []float64 {
	d := c.HeadDim
	out := make([]float64, d/2)
	for i := range out {
		f := 1 / math.Pow(c.RopeTheta, float64(2*i)/float64(d))
		switch c.RopeScaling.Type {
		case RopeLinear:
			f /= c.RopeScaling.Factor
		case RopeLlama3:
			r := c.RopeScaling
			wl := 2 * math.Pi / f
			lowW := float64(r.OriginalMaxPositions) / r.LowFreqFactor
			highW := float64(r.OriginalMaxPositions) / r.HighFreqFactor
			if wl > lowW {
				f = f / r.Factor
			} else if wl >= highW {
				sm := (float64(r.OriginalMaxPositions)/wl - r.LowFreqFactor) / (r.HighFreqFactor - r.LowFreqFactor)
				f = (1-sm)*f/r.Factor + sm*f
			}
		}
		out[i] = f
	}
	return out
}

// refForward is a plain float64 causal forward over the whole sequence,
// without KV cache: logits [len(tokens)][Vocab].
func refForward(c Config, w *Weights, tokens []int32) [][]float64 {
	T, H := len(tokens), c.HiddenSize
	mm := func(x [][]float64, wt []float32, out, in int) [][]float64 {
		y := make([][]float64, len(x))
		for t := range x {
			y[t] = make([]float64, out)
			for o := range out {
				var s float64
				for k := range in {
					s += x[t][k] * float64(wt[o*in+k])
				}
				y[t][o] = s
			}
		}
		return y
	}
	norm := func(x [][]float64, wt []float32) [][]float64 {
		y := make([][]float64, len(x))
		for t := range x {
			var ss float64
			for _, v := range x[t] {
				ss += v * v
			}
			r := 1 / math.Sqrt(ss/float64(len(x[t]))+c.RMSNormEps)
			y[t] = make([]float64, len(x[t]))
			for i, v := range x[t] {
				y[t][i] = float64(wt[i]) * v * r
			}
		}
		return y
	}
	inv := refInvFreq(c)
	rope := func(v []float64, pos int) {
		half := len(v) / 2
		rot := make([]float64, len(v))
		for j := range v {
			if j < half {
				rot[j] = -v[j+half]
			} else {
				rot[j] = v[j-half]
			}
		}
		for j := range v {
			a := float64(pos) * inv[j%half]
			v[j] = v[j]*math.Cos(a) + rot[j]*math.Sin(a)
		}
	}
	x := make([][]float64, T)
	for t, id := range tokens {
		x[t] = make([]float64, H)
		for i := range H {
			x[t][i] = float64(w.Embed.At(int(id)*H + i))
		}
	}
	HD := c.HeadDim
	for _, l := range w.Layers {
		h := norm(x, l.AttnNorm.Float32())
		q := mm(h, l.Wq.Float32(), c.QDim(), H)
		k := mm(h, l.Wk.Float32(), c.KVDim(), H)
		v := mm(h, l.Wv.Float32(), c.KVDim(), H)
		if c.QKVBias {
			for t := range T {
				for _, p := range []struct {
					y []float64
					b model.Tensor
				}{{q[t], l.Bq}, {k[t], l.Bk}, {v[t], l.Bv}} {
					for i := range p.y {
						p.y[i] += float64(p.b.At(i))
					}
				}
			}
		}
		for t := range T {
			for hh := range c.NumHeads {
				rope(q[t][hh*HD:(hh+1)*HD], t)
			}
			for hh := range c.NumKVHeads {
				rope(k[t][hh*HD:(hh+1)*HD], t)
			}
		}
		att := make([][]float64, T)
		for t := range T {
			att[t] = make([]float64, c.QDim())
			for hh := range c.NumHeads {
				g := hh / (c.NumHeads / c.NumKVHeads)
				sc := make([]float64, t+1)
				mx := math.Inf(-1)
				for s := 0; s <= t; s++ {
					var d float64
					for j := range HD {
						d += q[t][hh*HD+j] * k[s][g*HD+j]
					}
					sc[s] = d / math.Sqrt(float64(HD))
					mx = math.Max(mx, sc[s])
				}
				var sum float64
				for s := range sc {
					sc[s] = math.Exp(sc[s] - mx)
					sum += sc[s]
				}
				for s := range sc {
					for j := range HD {
						att[t][hh*HD+j] += sc[s] / sum * v[s][g*HD+j]
					}
				}
			}
		}
		o := mm(att, l.Wo.Float32(), H, c.QDim())
		for t := range T {
			for i := range H {
				x[t][i] += o[t][i]
			}
		}
		h = norm(x, l.MLPNorm.Float32())
		g := mm(h, l.WGate.Float32(), c.IntermediateSize, H)
		u := mm(h, l.WUp.Float32(), c.IntermediateSize, H)
		for t := range T {
			for i := range g[t] {
				g[t][i] = g[t][i] / (1 + math.Exp(-g[t][i])) * u[t][i]
			}
		}
		d := mm(g, l.WDown.Float32(), H, c.IntermediateSize)
		for t := range T {
			for i := range H {
				x[t][i] += d[t][i]
			}
		}
	}
	return mm(norm(x, w.Norm.Float32()), w.LMHead.Float32(), c.VocabSize, H)
}

func randTokens(r *rand.Rand, n, vocab int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(r.IntN(vocab))
	}
	return out
}

func maxDiff(t *testing.T, got []float32, want []float64) float64 {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("len %d, want %d", len(got), len(want))
	}
	var m float64
	for i := range got {
		m = math.Max(m, math.Abs(float64(got[i])-want[i]))
	}
	return m
}

// TestForwardMatchesReference: prefill of the whole sequence, and prefill
// of a part followed by one-token decodes across block boundaries, both
// match the float64 reference.
func TestForwardMatchesReference(t *testing.T) {
	for name, cfg := range testConfigs() {
		t.Run(name, func(t *testing.T) {
			m := NewRandomModel(cfg, 7, LoadOptions{KVTokens: 256, BlockSize: 4, Threads: 2})
			r := rand.New(rand.NewPCG(1, 2))
			toks := randTokens(r, 37, cfg.VocabSize)
			ref := refForward(cfg, m.Weights, toks)
			V := cfg.VocabSize

			s := m.NewSequence()
			logits, err := s.Forward(toks, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			for i := range toks {
				if d := maxDiff(t, logits[i*V:(i+1)*V], ref[i]); d > 1e-3 {
					t.Fatalf("prefill row %d: max |Δ| %g", i, d)
				}
			}
			s.Free()

			s = m.NewSequence()
			if _, err := s.Forward(toks[:5], nil, []int32{}); err != nil {
				t.Fatal(err)
			}
			for i := 5; i < len(toks); i++ {
				lg, err := s.Forward(toks[i:i+1], nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				if d := maxDiff(t, lg, ref[i]); d > 1e-3 {
					t.Fatalf("decode row %d: max |Δ| %g", i, d)
				}
			}
			if s.Len() != len(toks) {
				t.Fatalf("Len %d, want %d", s.Len(), len(toks))
			}
			s.Free()
			if u := m.KV().UsedBlocks() - m.KV().CachedBlocks(); u != 0 {
				t.Fatalf("%d blocks still used after Free", u)
			}
		})
	}
}

// TestTreeEqualsChain: a tree forward whose tree is a chain gives the chain's
// logits; a branching tree gives, for every node, the logits of the chain
// prefix+path to that node; KeepTree of a path leaves the KV a chain forward builds.
func TestTreeEqualsChain(t *testing.T) {
	cfg := testConfigs()["gqa"]
	m := NewRandomModel(cfg, 3, LoadOptions{KVTokens: 512, BlockSize: 4, Threads: 2})
	V := cfg.VocabSize
	prefix := []int32{5, 9, 13, 2, 40, 7}
	// tree: 0:a(-1) 1:b(0) 2:c(0) 3:d(1) 4:e(2) 5:f(-1) 6:g(4)
	tree := []int32{11, 12, 21, 31, 41, 51, 60}
	par := []int32{-1, 0, 0, 1, 2, -1, 4}
	s := m.NewSequence()
	if _, err := s.Forward(prefix, nil, []int32{}); err != nil {
		t.Fatal(err)
	}
	lg, err := s.Forward(tree, par, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Forward([]int32{1}, nil, nil); err != ErrTreePending {
		t.Fatalf("forward with pending tree: err %v, want ErrTreePending", err)
	}
	pathOf := func(i int) []int {
		var p []int
		for j := i; j >= 0; j = int(par[j]) {
			p = append([]int{j}, p...)
		}
		return p
	}
	for i := range tree {
		chain := append([]int32(nil), prefix...)
		for _, j := range pathOf(i) {
			chain = append(chain, tree[j])
		}
		ref := refForward(cfg, m.Weights, chain)
		if d := maxDiff(t, lg[i*V:(i+1)*V], ref[len(chain)-1]); d > 1e-3 {
			t.Fatalf("tree node %d: max |Δ| %g vs chain", i, d)
		}
	}
	// keep path 0->2->4->6, then decode one more token; compare with chain.
	keep := []int{0, 2, 4, 6}
	if err := s.KeepTree(keep); err != nil {
		t.Fatal(err)
	}
	if err := s.KeepTree(keep); err == nil {
		t.Fatal("second KeepTree succeeded")
	}
	chain := append(append([]int32(nil), prefix...), 11, 21, 41, 60)
	if got := s.Tokens(); len(got) != len(chain) {
		t.Fatalf("tokens %v, want %v", got, chain)
	}
	next := []int32{17}
	lg2, err := s.Forward(next, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ref := refForward(cfg, m.Weights, append(chain, next...))
	if d := maxDiff(t, lg2, ref[len(chain)]); d > 1e-3 {
		t.Fatalf("after KeepTree: max |Δ| %g", d)
	}
	// the KV of every position equals a fresh chain forward's.
	c := m.NewSequence()
	if _, err := c.Forward(append(chain, next...), nil, []int32{}); err != nil {
		t.Fatal(err)
	}
	cpu := m.Backend().(*CPUBackend)
	for l := range cfg.NumLayers {
		for p := range c.Len() {
			k1, v1 := cpu.KV(l, s.Slot(p))
			k2, v2 := cpu.KV(l, c.Slot(p))
			for j := range k1 {
				if math.Abs(float64(k1[j]-k2[j])) > 1e-5 || math.Abs(float64(v1[j]-v2[j])) > 1e-5 {
					t.Fatalf("layer %d pos %d: KV differs from chain", l, p)
				}
			}
		}
	}
	// invalid keep: not a root path
	s2 := m.NewSequence()
	s2.Forward(prefix, nil, []int32{})
	s2.Forward(tree, par, []int32{})
	if err := s2.KeepTree([]int{1}); err == nil {
		t.Fatal("KeepTree of a non-root path succeeded")
	}
	s.Free()
	c.Free()
	s2.Free()
	if u := m.KV().UsedBlocks(); u != 0 {
		t.Fatalf("%d blocks used after Free", u)
	}
}

// TestBatchedEqualsSeparate: one ForwardBatch over three sequences (prefill,
// decode, tree) gives the logits of separate forwards.
func TestBatchedEqualsSeparate(t *testing.T) {
	cfg := testConfigs()["gqa"]
	m := NewRandomModel(cfg, 11, LoadOptions{KVTokens: 1024, BlockSize: 4, Threads: 2})
	V := cfg.VocabSize
	r := rand.New(rand.NewPCG(5, 6))
	p1, p2, p3 := randTokens(r, 9, V), randTokens(r, 14, V), randTokens(r, 6, V)
	mk := func() (*Sequence, *Sequence, *Sequence) {
		a, b, c := m.NewSequence(), m.NewSequence(), m.NewSequence()
		b.Forward(p2[:13], nil, []int32{})
		c.Forward(p3, nil, []int32{})
		return a, b, c
	}
	tree, par := []int32{3, 4, 5}, []int32{-1, -1, 0}
	a, b, c := mk()
	items := []BatchItem{{Seq: a, Tokens: p1}, {Seq: b, Tokens: p2[13:]}, {Seq: c, Tokens: tree, Parents: par, LogitsRows: []int32{2, 0}}}
	if err := m.ForwardBatch(items); err != nil {
		t.Fatal(err)
	}
	a2, b2, c2 := mk()
	la, _ := a2.Forward(p1, nil, nil)
	lb, _ := b2.Forward(p2[13:], nil, nil)
	lc, _ := c2.Forward(tree, par, nil)
	check := func(name string, got, want []float32) {
		if len(got) != len(want) {
			t.Fatalf("%s: len %d want %d", name, len(got), len(want))
		}
		for i := range got {
			if got[i] != want[i] { // batch invariance: bitwise equal
				t.Fatalf("%s[%d]: %g vs %g", name, i, got[i], want[i])
			}
		}
	}
	check("prefill", items[0].Logits, la)
	check("decode", items[1].Logits, lb)
	check("tree", items[2].Logits, append(append([]float32(nil), lc[2*V:3*V]...), lc[0:V]...))
}

// TestForkCopyOnWrite: two forks of a sequence ending mid-block continue
// with different tokens; each matches the reference and neither disturbs the other.
func TestForkCopyOnWrite(t *testing.T) {
	cfg := testConfigs()["gqa"]
	m := NewRandomModel(cfg, 13, LoadOptions{KVTokens: 256, BlockSize: 4, Threads: 2, DisablePrefixCache: true})
	V := cfg.VocabSize
	prefix := []int32{4, 8, 15, 16, 23, 42}
	a := m.NewSequence()
	if _, err := a.Forward(prefix, nil, []int32{}); err != nil {
		t.Fatal(err)
	}
	used := m.KV().UsedBlocks()
	b := a.Fork()
	if m.KV().UsedBlocks() != used {
		t.Fatal("fork allocated blocks")
	}
	la, err := a.Forward([]int32{1, 2, 3}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := b.Forward([]int32{7}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ra := refForward(cfg, m.Weights, append(append([]int32(nil), prefix...), 1, 2, 3))
	rb := refForward(cfg, m.Weights, append(append([]int32(nil), prefix...), 7))
	if d := maxDiff(t, la[2*V:], ra[8]); d > 1e-3 {
		t.Fatalf("fork a: %g", d)
	}
	if d := maxDiff(t, lb, rb[6]); d > 1e-3 {
		t.Fatalf("fork b: %g", d)
	}
	// a's next token still sees its own KV (b's write went to a copy).
	la2, _ := a.Forward([]int32{9}, nil, nil)
	ra2 := refForward(cfg, m.Weights, append(append([]int32(nil), prefix...), 1, 2, 3, 9))
	if d := maxDiff(t, la2, ra2[9]); d > 1e-3 {
		t.Fatalf("fork a after b wrote: %g", d)
	}
	a.Free()
	b.Free()
	if m.KV().UsedBlocks() != 0 {
		t.Fatalf("%d blocks used after freeing both forks", m.KV().UsedBlocks())
	}
}

func TestValidateRequest(t *testing.T) {
	cfg := testConfigs()["gqa"]
	V := cfg.VocabSize
	ok := func() *ForwardRequest {
		return &ForwardRequest{CachedSlots: []int32{0}, Tokens: []int32{1, 2}, Positions: []int32{1, 2}, Slots: []int32{1, 2},
			Logits: make([]float32, 2*V)}
	}
	if err := ValidateRequest(cfg, 8, 0, ok()); err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string]func(r *ForwardRequest){
		"token out of vocab":  func(r *ForwardRequest) { r.Tokens[1] = int32(V) },
		"slot out of range":   func(r *ForwardRequest) { r.Slots[0] = 8 },
		"cached slot":         func(r *ForwardRequest) { r.CachedSlots[0] = -1 },
		"positions length":    func(r *ForwardRequest) { r.Positions = r.Positions[:1] },
		"parent not before":   func(r *ForwardRequest) { r.Parents = []int32{-1, 1} },
		"parents length":      func(r *ForwardRequest) { r.Parents = []int32{-1} },
		"logits row range":    func(r *ForwardRequest) { r.LogitsRows = []int32{2} },
		"logits buffer small": func(r *ForwardRequest) { r.Logits = r.Logits[:V] },
	} {
		r := ok()
		edit(r)
		if err := ValidateRequest(cfg, 8, 0, r); err == nil {
			t.Errorf("%s: accepted", name)
		}
		m := NewRandomModel(cfg, 1, LoadOptions{KVTokens: 8, BlockSize: 4})
		if err := m.Backend().Forward([]*ForwardRequest{r}); err == nil {
			t.Errorf("%s: CPU backend accepted", name)
		}
	}
}
