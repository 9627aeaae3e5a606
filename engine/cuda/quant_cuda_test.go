//go:build cuda

package cuda

import (
	"math/rand/v2"
	"os"
	"testing"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/model"
)

// int8Reference returns a copy of w (already fp16-rounded) whose
// projections and LM head are replaced by their int8 round trip
// (model.QuantizeI8, then widened): the float32 weights the int8 GPU
// backend computes with. Embedding and norms are shared with w. With tied
// embeddings the copy's LM head is its own slice (the GPU embeds with the
// fp16 table and projects with the int8 copy).
func int8Reference(t testing.TB, cfg engine.Config, w *engine.Weights) *engine.Weights {
	t.Helper()
	rt := func(v model.Tensor) model.Tensor { return v.To(model.I8).To(model.F32) }
	out := &engine.Weights{Embed: w.Embed, Norm: w.Norm, LMHead: rt(w.LMHead), Layers: make([]engine.LayerWeights, len(w.Layers))}
	for i, l := range w.Layers {
		out.Layers[i] = engine.LayerWeights{AttnNorm: l.AttnNorm, MLPNorm: l.MLPNorm,
			Wq: rt(l.Wq), Wk: rt(l.Wk), Wv: rt(l.Wv), Wo: rt(l.Wo), WGate: rt(l.WGate), WUp: rt(l.WUp), WDown: rt(l.WDown),
			Bq: l.Bq, Bk: l.Bk, Bv: l.Bv}
	}
	return out
}

// int4Reference is int8Reference for int4 weights: the projections and LM
// head replaced by their group-wise int4 round trip (model.QuantizeI4,
// model.DequantizeI4: the values the int4 GPU backend computes with).
func int4Reference(t testing.TB, cfg engine.Config, w *engine.Weights) *engine.Weights {
	t.Helper()
	rt := func(v model.Tensor) model.Tensor {
		p, s, err := model.QuantizeI4(v)
		if err != nil {
			t.Fatal(err)
		}
		return model.NewF32(model.DequantizeI4(p, s, v.Rows(), v.Cols()), v.Shape...)
	}
	out := &engine.Weights{Embed: w.Embed, Norm: w.Norm, LMHead: rt(w.LMHead), Layers: make([]engine.LayerWeights, len(w.Layers))}
	for i, l := range w.Layers {
		out.Layers[i] = engine.LayerWeights{AttnNorm: l.AttnNorm, MLPNorm: l.MLPNorm,
			Wq: rt(l.Wq), Wk: rt(l.Wk), Wv: rt(l.Wv), Wo: rt(l.Wo), WGate: rt(l.WGate), WUp: rt(l.WUp), WDown: rt(l.WDown),
			Bq: l.Bq, Bk: l.Bk, Bv: l.Bv}
	}
	return out
}

// int4Configs are the test configs whose hidden size and q dim are
// multiples of 32, the intermediate size rounded up to one (int4 rows are
// read in groups of 32).
func int4Configs() map[string]engine.Config {
	cs := configs()
	for k, c := range cs {
		if c.HiddenSize%32 != 0 || c.QDim()%32 != 0 {
			delete(cs, k)
			continue
		}
		c.IntermediateSize = (c.IntermediateSize + 31) / 32 * 32
		cs[k] = c
	}
	return cs
}

// int8Configs are the test configs with the intermediate size rounded up
// to a multiple of 16 (int8 rows are read in 16-byte chunks).
func int8Configs() map[string]engine.Config {
	cs := configs()
	for k, c := range cs {
		c.IntermediateSize = (c.IntermediateSize + 15) / 16 * 16
		cs[k] = c
	}
	return cs
}

// The int8 GPU backend against the CPU backend running the dequantized
// weights: the int8 GEMVs (decode, graph-replayed or eager, and chunked
// prefill without cuBLAS) keep fp32 activations and must agree to 1e-4;
// prefill over cuBLAS (weights dequantized to fp16, fp16 activations)
// within the fp16 path's 5e-3. Greedy tokens agree wherever the CPU's
// choice is not a near-tie.
func TestInt8ForwardMatchesCPU(t *testing.T) {
	quantForwardMatchesCPU(t, engine.QuantInt8, int8Configs(), int8Reference)
}

// The int4 GPU backend against the CPU backend running the dequantized
// int4 weights (model.DequantizeI4 of model.QuantizeI4: the group scales
// as fp16, as the GPU stores them), with the int8 test's tolerances.
func TestInt4ForwardMatchesCPU(t *testing.T) {
	quantForwardMatchesCPU(t, QuantInt4, int4Configs(), int4Reference)
}

func quantForwardMatchesCPU(t *testing.T, quant string, cfgs map[string]engine.Config,
	reference func(testing.TB, engine.Config, *engine.Weights) *engine.Weights) {
	for name, cfg := range cfgs {
		for _, opt := range []Options{{}, {NoCUBLAS: true}, {NoGraphs: true}} {
			t.Run(name, func(t *testing.T) {
				r := rand.New(rand.NewPCG(rand.Uint64(), 21))
				w := engine.RandomWeights(cfg, r.Uint64())
				roundF16(w)
				const slots = 2048
				cpu, err := engine.NewCPUBackend(cfg, reference(t, cfg, w), slots, 0)
				if err != nil {
					t.Fatal(err)
				}
				opt.NumSlots, opt.Quantize = slots, quant
				gpu, err := New(cfg, w, opt)
				if err != nil {
					if os.Getenv("SPECGATE_EXPECT_GPU") == "" {
						t.Skipf("no GPU: %v", err)
					}
					t.Fatal(err)
				}
				defer gpu.Close()
				if gpu.Quantization() != quant {
					t.Fatalf("Quantization() = %q", gpu.Quantization())
				}
				const P = 21
				V := cfg.VocabSize
				prompt := make([]int32, P)
				for i := range prompt {
					prompt[i] = int32(r.IntN(V))
				}
				req := &engine.ForwardRequest{Tokens: prompt, Positions: seq(0, P), Slots: seq(0, P)}
				rc, rg := clone(req), clone(req)
				fwd(t, cpu, V, rc)
				fwd(t, gpu, V, rg)
				tol := 5e-3
				if opt.NoCUBLAS {
					tol = 1e-4
				}
				if e := rel(rg.Logits, rc.Logits); e > tol {
					t.Fatalf("prefill logits rel err %.3g > %g", e, tol)
				}
				next := argmax(rc.Logits[(P-1)*V:])
				n := P
				for step := 0; step < 30; step++ {
					q := &engine.ForwardRequest{CachedSlots: seq(0, n), Tokens: []int32{next}, Positions: []int32{int32(n)}, Slots: seq(n, 1)}
					qc, qg := clone(q), clone(q)
					fwd(t, cpu, V, qc)
					fwd(t, gpu, V, qg)
					if e := rel(qg.Logits, qc.Logits); e > tol {
						t.Fatalf("step %d logits rel err %.3g > %g", step, e, tol)
					}
					a, b := argmax(qc.Logits), argmax(qg.Logits)
					n++
					if a != b {
						if gap(qc.Logits) > 10*tol {
							t.Fatalf("step %d: greedy token %d on CPU, %d on GPU (gap %.3g)", step, a, b, gap(qc.Logits))
						}
						break
					}
					next = a
				}
				// A token tree in one forward (GEMV path: 7 tokens) equals
				// the CPU's tree logits.
				parents := []int32{-1, 0, 0, 1, 1, 2, 3}
				tree := make([]int32, len(parents))
				pos := make([]int32, len(parents))
				for i := range tree {
					tree[i] = int32(r.IntN(V))
					if parents[i] >= 0 {
						pos[i] = pos[parents[i]] + 1
					} else {
						pos[i] = int32(n)
					}
				}
				tr := &engine.ForwardRequest{CachedSlots: seq(0, n), Tokens: tree, Positions: pos, Slots: seq(1000, len(tree)), Parents: parents}
				tc, tg := clone(tr), clone(tr)
				fwd(t, cpu, V, tc)
				fwd(t, gpu, V, tg)
				if e := rel(tg.Logits, tc.Logits); e > tol {
					t.Fatalf("tree logits rel err %.3g > %g", e, tol)
				}
			})
		}
	}
}

// Batch shapes of serving (decode batches 1..64, mixed prefill/decode
// around the GEMV/cuBLAS boundary) with int8 weights.
func TestBatchShapesInt8(t *testing.T) { batchShapes(t, engine.QuantInt8) }

// The same with int4 weights.
func TestBatchShapesInt4(t *testing.T) { batchShapes(t, QuantInt4) }
