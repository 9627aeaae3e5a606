//go:build cuda

package cuda_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/cuda"
	"github.com/specgate/specgate/kernels"
)

// ctxTokens: a deterministic 100-token context for the shipped target.
func ctxTokens(n int) []int32 {
	ctx := make([]int32, n)
	for i := range ctx {
		ctx[i] = int32(5 + 7*i%8000)
	}
	return ctx
}

// TestExactTreeMatchesPlainOnGPU is the exact-verification contract on the
// shipped target: every logits row of a tree step (random branchy trees of
// 5..64 nodes, so both the batch-1..8 GEMV path and the one-launch wide
// GEMV path of exact steps, with masked siblings in every token's key
// range) has the same bits as plain one-token decoding of that node's
// path computes for its last token.
func TestExactTreeMatchesPlainOnGPU(t *testing.T) {
	// default: grouped attention (all query heads of a KV head per block)
	// from 23 tokens on an H100; per-head: the round-6 kernel for every
	// size; grouped: from 2 tokens; at 600 keys of context (3 splits).
	for _, c := range []struct {
		name string
		t    kernels.Tuning
		ctx  int
	}{{"default", kernels.Tuning{}, 100}, {"per-head", kernels.Tuning{AttnGroupMin: -1}, 100},
		{"grouped", kernels.Tuning{AttnGroupMin: 2}, 100}, {"grouped-ctx600", kernels.Tuning{AttnGroupMin: 2}, 600},
		{"default-ctx600", kernels.Tuning{}, 600},
		// the projection families (rounds 8-9): the tensor-core kernels (the
		// default for the shipped target's shapes since round 9) and the
		// CUDA-core GEMVs, each pinned
		{"mma", kernels.Tuning{GemvMMA: kernels.GemvMMAOn}, 100},
		// round 9's block rows of 16 tokens above 8 (GemvMMATiles 2)
		{"mma-r16", kernels.Tuning{GemvMMA: kernels.GemvMMAOn, GemvMMATiles: 2}, 100},
		{"cudacore", kernels.Tuning{GemvMMA: kernels.GemvMMAOff}, 100}} {
		t.Run(c.name, func(t *testing.T) { testExactTreeMatchesPlain(t, c.t, c.ctx) })
	}
}

func testExactTreeMatchesPlain(t *testing.T, tu kernels.Tuning, ctx int) {
	m := loadGPUOpt(t, "../../models/specgate-target", cuda.Options{Tuning: tu})
	V := m.Config.VocabSize
	prompt := ctxTokens(ctx)
	r := rand.New(rand.NewPCG(11, 12))
	for _, T := range []int{5, 8, 12, 33, 64} {
		toks, par := make([]int32, T), make([]int32, T)
		for i := range toks {
			toks[i] = int32(10 + r.IntN(V-10))
			par[i] = int32(r.IntN(i+1)) - 1 // any earlier node or the root
			if i > 0 && r.IntN(3) > 0 {
				par[i] = int32(i - 1) // mostly deep paths
			}
		}
		s := m.NewSequence()
		if _, err := s.Forward(prompt, nil, []int32{}); err != nil {
			t.Fatal(err)
		}
		tree, err := s.Forward(toks, par, nil)
		if err != nil {
			t.Fatal(err)
		}
		tree = append([]float32(nil), tree...)
		s.Free()
		for i := 0; i < T; i++ {
			var path []int32
			for a := int32(i); a >= 0; a = par[a] {
				path = append([]int32{toks[a]}, path...)
			}
			p := m.NewSequence()
			if _, err := p.Forward(prompt, nil, []int32{}); err != nil {
				t.Fatal(err)
			}
			for _, tok := range path[:len(path)-1] {
				if _, err := p.Forward([]int32{tok}, nil, []int32{}); err != nil {
					t.Fatal(err)
				}
			}
			row, err := p.Forward(path[len(path)-1:], nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			p.Free()
			for v := 0; v < V; v++ {
				if math.Float32bits(row[v]) != math.Float32bits(tree[i*V+v]) {
					t.Fatalf("T=%d node %d (depth %d): logit %d = %v in the tree, %v in plain decoding", T, i, len(path), v, tree[i*V+v], row[v])
				}
			}
		}
		t.Logf("T=%d: %d rows bit-identical to plain decoding", T, T)
	}
}

// TestVerifyCostStagesOnGPU (SPECGATE_PROFILE set; skipped otherwise): the
// cost of one target forward of a T-token tree at context 100 on the
// shipped target, T = 1..64: device µs of the graph-replayed step (median
// of 30, argmax rows only and logits back), exact steps with the default
// projection family (the tensor-core kernels for the shipped target since
// round 9), the CUDA-core GEMVs (GemvMMA off: the projections before round
// 8), the tensor-core kernels (GemvMMA on; block rows of 8, 16 or 64 tokens: mma, mma-r16, mma-t4) and FastVerify (cuBLAS) side by side, and the device time per stage
// of the eager step without PDL (stage profile, prof.go).
func TestVerifyCostStagesOnGPU(t *testing.T) {
	if os.Getenv("SPECGATE_PROFILE") == "" {
		t.Skip("SPECGATE_PROFILE not set")
	}
	load := func(o cuda.Options) (*engine.Model, *cuda.Backend) {
		m, err := engine.Load("../../models/specgate-target", engine.LoadOptions{KVTokens: 8192, DisablePrefixCache: true,
			NewBackend: cuda.Factory(o)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m, m.Backend().(*cuda.Backend)
	}
	med := func(x []float64) float64 {
		if len(x) == 0 {
			return 0
		}
		sort.Float64s(x)
		return x[len(x)/2]
	}
	Ts := []int{1, 2, 4, 5, 8, 9, 12, 16, 17, 24, 32, 33, 48, 64}
	tree := func(T int) ([]int32, []int32) {
		toks, par := make([]int32, T), make([]int32, T)
		for i := range toks {
			toks[i], par[i] = int32(11+5*i), int32(i)-1
			if i%4 == 3 {
				par[i] = int32(i) - 2 // a few siblings
			}
		}
		return toks, par
	}
	type cfg struct {
		name string
		opt  cuda.Options
	}
	var base float64
	for _, c := range []cfg{{"default", cuda.Options{TimeSteps: true}},
		{"attn-r7", cuda.Options{TimeSteps: true, Tuning: kernels.Tuning{AttnGroupR7: true}}}, // round 7's grouped attention kernel
		{"cudacore", cuda.Options{TimeSteps: true, Tuning: kernels.Tuning{GemvMMA: kernels.GemvMMAOff}}},
		{"mma", cuda.Options{TimeSteps: true, Tuning: kernels.Tuning{GemvMMA: kernels.GemvMMAOn}}},
		{"mma-r16", cuda.Options{TimeSteps: true, Tuning: kernels.Tuning{GemvMMA: kernels.GemvMMAOn, GemvMMATiles: 2}}},
		{"mma-t4", cuda.Options{TimeSteps: true, Tuning: kernels.Tuning{GemvMMA: kernels.GemvMMAOn, GemvMMATiles: 4}}},
		{"fastverify", cuda.Options{TimeSteps: true, FastVerify: true}}} {
		m, be := load(c.opt)
		s := m.NewSequence()
		if _, err := s.Forward(ctxTokens(100), nil, []int32{}); err != nil {
			t.Fatal(err)
		}
		for _, T := range Ts {
			toks, par := tree(T)
			line := ""
			for _, arg := range []bool{true, false} {
				var dev, wall []float64
				for rep := range 33 {
					it := []engine.BatchItem{{Seq: s, Tokens: toks, Parents: par, ArgmaxOnly: arg}}
					if T == 1 {
						it[0].Parents = nil
					}
					be.StepTimes()
					t0 := time.Now()
					if err := m.ForwardBatch(it); err != nil {
						t.Fatal(err)
					}
					w := time.Since(t0).Seconds()
					d := be.StepTimes()
					if T == 1 {
						s.Truncate(100)
					} else if err := s.KeepTree(nil); err != nil {
						t.Fatal(err)
					}
					if rep >= 3 && len(d) == 1 {
						dev, wall = append(dev, d[0]*1e6), append(wall, w*1e6)
					}
				}
				md := med(dev)
				if T == 1 && arg && c.name == "default" {
					base = md
				}
				line += fmt.Sprintf("  %s: device %6.1f us (%.2fx T=1) wall %6.1f us", map[bool]string{true: "argmax", false: "logits"}[arg], md, md/base, med(wall))
			}
			t.Logf("%-10s T=%2d%s", c.name, T, line)
		}
		if c.name == "fastverify" || c.name == "mma-t4" || c.name == "mma-r16" {
			s.Free()
			continue
		}
		// stage profile: eager, PDL off (a separate backend)
		s.Free()
		mp, bp := load(cuda.Options{NoPDL: true, Tuning: c.opt.Tuning})
		sp := mp.NewSequence()
		if _, err := sp.Forward(ctxTokens(100), nil, []int32{}); err != nil {
			t.Fatal(err)
		}
		bp.SetStageProfile(true)
		for _, T := range Ts {
			toks, par := tree(T)
			bp.StageProfile()
			for range 12 {
				it := []engine.BatchItem{{Seq: sp, Tokens: toks, Parents: par, ArgmaxOnly: true}}
				if T == 1 {
					it[0].Parents = nil
				}
				if err := mp.ForwardBatch(it); err != nil {
					t.Fatal(err)
				}
				if T == 1 {
					sp.Truncate(100)
				} else if err := sp.KeepTree(nil); err != nil {
					t.Fatal(err)
				}
			}
			names, secs, n := bp.StageProfile()
			var b strings.Builder
			sum := 0.0
			for i, nm := range names {
				us := secs[i] / float64(max(n, 1)) * 1e6
				sum += us
				fmt.Fprintf(&b, " %s %.1f", nm, us)
			}
			t.Logf("%s stages T=%2d (eager, no PDL, µs per forward, summed over layers): total %.1f:%s", c.name, T, sum, b.String())
		}
		bp.SetStageProfile(false)
		sp.Free()
	}
}
