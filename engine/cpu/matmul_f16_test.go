package cpu

import (
	"math"
	"testing"

	"github.com/specgate/specgate/engine/model"
)

// TestF16TensorsPackedDirectly: a backend built from F16 tensors packs
// their bits into binary16 panels and keeps no float32 copy, and its logits
// equal, bit for bit, those of a backend built from the same values as F32
// tensors (which widens and packs them); with the AVX2 kernels turned off
// afterwards the panels-only matrices still compute (portable order, so
// close rather than equal).
func TestF16TensorsPackedDirectly(t *testing.T) {
	if !useAVX2 || !hasF16C {
		t.Skip("no AVX2+FMA+F16C")
	}
	for name, cfg := range testConfigs() {
		w32 := RandomWeights(cfg, 11)
		roundF16(w32)
		w16 := *w32
		w16.Layers = append([]LayerWeights(nil), w32.Layers...)
		for i := range w16.Layers {
			l := &w16.Layers[i]
			for _, m := range []*model.Tensor{&l.Wq, &l.Wk, &l.Wv, &l.Wo, &l.WGate, &l.WUp, &l.WDown} {
				*m = m.To(model.F16)
			}
		}
		if !cfg.TieWordEmbeddings {
			w16.LMHead = w16.LMHead.To(model.F16)
		}
		a, err := NewCPUBackend(cfg, &w16, 64, 2)
		if err != nil {
			t.Fatal(err)
		}
		b, err := NewCPUBackend(cfg, w32, 64, 2)
		if err != nil {
			t.Fatal(err)
		}
		if !a.HalfWeights() || a.layers[0].q.f32 != nil || a.layers[0].down.h == nil || b.layers[0].q.f32 == nil {
			t.Fatalf("%s: F16 tensors: half %v, q_proj float32 copy %v; F32 tensors: float32 copy %v",
				name, a.HalfWeights(), a.layers[0].q.f32 != nil, b.layers[0].q.f32 != nil)
		}
		V := cfg.VocabSize
		req := func() *ForwardRequest {
			return &ForwardRequest{Tokens: []int32{1, 5, 9, 2, 7}, Positions: []int32{0, 1, 2, 3, 4},
				Slots: []int32{0, 1, 2, 3, 4}, Logits: make([]float32, 5*V)}
		}
		ra, rb := req(), req()
		if err := a.Forward([]*ForwardRequest{ra}); err != nil {
			t.Fatal(err)
		}
		if err := b.Forward([]*ForwardRequest{rb}); err != nil {
			t.Fatal(err)
		}
		for i := range ra.Logits {
			if ra.Logits[i] != rb.Logits[i] {
				t.Fatalf("%s: logit %d: F16 tensors %v, F32 tensors %v", name, i, ra.Logits[i], rb.Logits[i])
			}
		}
		func() {
			saved2, saved512 := useAVX2, useAVX512
			defer func() { useAVX2, useAVX512 = saved2, saved512 }()
			useAVX2, useAVX512 = false, false
			rp := req()
			if err := a.Forward([]*ForwardRequest{rp}); err != nil {
				t.Fatal(err)
			}
			for i, v := range rp.Logits {
				if d := math.Abs(float64(v - rb.Logits[i])); !(d <= 1e-3*(1+math.Abs(float64(rb.Logits[i])))) {
					t.Fatalf("%s: portable path logit %d: %v, packed %v", name, i, v, rb.Logits[i])
				}
			}
		}()
	}
}
