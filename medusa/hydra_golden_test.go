package medusa

import (
	"encoding/binary"
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/specgate/specgate/safetensors"
)

// The Hydra golden files in testdata/golden/hydra* were written by
// tools/hydra_golden.py with PyTorch on the GPU machine: random heads in
// the Hydra directory format for the golden base target (H = 64, vocabulary
// 320), their inputs (hidden rows, path tokens x_1..x_K) and each head's
// logits computed in float64 from the stored (dequantized) weights by the
// script's own forward (HYDRA-FORMAT.md, "Golden").

// readI32 reads an I32 tensor.
func readI32(t *testing.T, f *safetensors.File, name string) ([]int32, []int64) {
	t.Helper()
	info, ok := f.Info(name)
	if !ok || info.DType != safetensors.I32 {
		t.Fatalf("golden tensor %q: %v (want I32)", name, info.DType)
	}
	b, err := f.ReadRaw(name)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int32, len(b)/4)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out, info.Shape
}

func TestGoldenHydra(t *testing.T) {
	base := goldenBase(t)
	for _, tc := range []struct {
		dir            string
		res, shared    bool
		r              int
		int8Everywhere bool
	}{
		{"hydra", true, false, 64, false},         // reference layout, fp16, own projections with bias
		{"hydra-compact", false, false, 32, true}, // compact, int8 (hydra_embed_proj too), one all-zero row
		{"hydra-shared", false, true, 32, false},  // compact, the target's lm_head over head_vocab rows
	} {
		t.Run(tc.dir, func(t *testing.T) {
			dir := filepath.Join("testdata/golden", tc.dir)
			if err := Check(Spec{Heads: dir}, 64, 320); err != nil {
				t.Fatalf("Check: %v", err)
			}
			h, err := Load(dir, base, LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !h.IsHydra() || h.Shared != tc.shared || h.EmbedDim() != tc.r || (h.hy.rh != nil) != tc.res {
				t.Fatalf("loaded hydra=%v shared=%v r=%d res=%v", h.IsHydra(), h.Shared, h.EmbedDim(), h.hy.rh != nil)
			}
			in, err := safetensors.Open(filepath.Join(dir, "inputs.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			defer in.Close()
			hidden, hs, err := in.ReadFloat32("hidden")
			if err != nil {
				t.Fatal(err)
			}
			toks, ts := readI32(t, in, "tokens")
			lf, err := safetensors.Open(filepath.Join(dir, "logits.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			defer lf.Close()
			ids, _ := readI32(t, lf, "ids")
			N, K := int(hs[0]), int(ts[1])
			if K != h.NumHeads || int(ts[0]) != N || int(hs[1]) != h.Hidden {
				t.Fatalf("golden inputs hidden %v tokens %v for %d heads, hidden %d", hs, ts, h.NumHeads, h.Hidden)
			}
			R := h.Rows()
			if R != len(ids) {
				t.Fatalf("%d rows, golden %d", R, len(ids))
			}
			for r, id := range ids {
				if h.TokenOf(r) != id {
					t.Fatalf("row %d is token %d, golden %d", r, h.TokenOf(r), id)
				}
			}
			row := make([]int32, N)
			for k := range row {
				row[N-1-k] = int32(k) // nodes in reverse row order: the per-row product is gathered by index
			}
			worst := 0.0
			for i := range K {
				want, ls, err := lf.ReadFloat32(fmt.Sprintf("logits.%d", i))
				if err != nil {
					t.Fatal(err)
				}
				if int(ls[0]) != N || int(ls[1]) != R {
					t.Fatalf("logits.%d shape %v", i, ls)
				}
				var path []int32
				for _, q := range row {
					path = append(path, toks[int(q)*K:int(q)*K+i+1]...)
				}
				got := h.HydraLogits(i, hidden, N, row, path, nil)
				for k, q := range row {
					for c := range R {
						worst = max(worst, math.Abs(float64(got[k*R+c]-want[int(q)*R+c])))
					}
				}
			}
			t.Logf("%s: max |go - torch float64| = %.2e over %d heads x %d rows x %d logits", tc.dir, worst, K, N, R)
			if worst > 1e-4 {
				t.Fatalf("max abs diff %.3e > 1e-4", worst)
			}
		})
	}
}
