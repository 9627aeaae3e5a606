package medusa

import (
	"fmt"
	"testing"

	"github.com/specgate/specgate/engine"
)

// BenchmarkLogits: the shipped heads on one hidden row (what a batch-1
// step costs the proposer), all five heads, by vocabulary limit.
func BenchmarkLogits(b *testing.B) {
	target, _ := shipped(b)
	for _, vocab := range []int{0, 2048, 1024} {
		h, err := Load(shippedHeads, target, LoadOptions{VocabLimit: vocab})
		if err != nil {
			b.Fatal(err)
		}
		x := make([]float32, h.Hidden)
		for i := range x {
			x[i] = float32(i%7) - 3
		}
		b.Run(fmt.Sprintf("vocab=%d", h.Rows()), func(b *testing.B) {
			var out []float32
			for b.Loop() {
				out = h.Logits(x, 1, h.NumHeads, out)
			}
		})
	}
}

// BenchmarkLogitsInt8: the shipped int8 heads on one hidden row through
// the CPU backend's int8 weight-only kernels (what Load builds) against
// the same heads dequantized to float32 matrices (what Load built before
// e653040), for one head and for all five; interleave with -count and
// compare medians: go test -run '^$' -bench LogitsInt8 -cpu 1 -count 5 ./medusa/
func BenchmarkLogitsInt8(b *testing.B) {
	target, _ := shipped(b)
	h, err := Load(shippedHeads, target, LoadOptions{})
	if err != nil {
		b.Fatal(err)
	}
	if h.Shared || len(h.projRaw) != h.NumHeads {
		b.Fatalf("shipped heads: shared %v, %d projections: want own int8 projections", h.Shared, len(h.projRaw))
	}
	f := *h // the float32 peer: the dequantized matrices the device heads get
	f.w = make([][]*engine.Mat, h.NumHeads)
	f.proj = make([]*engine.Mat, h.NumHeads)
	fw, fp := h.deviceWeights()
	for i := range h.NumHeads {
		for _, w := range fw[i] {
			f.w[i] = append(f.w[i], engine.NewMat(w, h.Hidden, h.Hidden))
		}
		f.proj[i] = engine.NewMat(fp[i], h.Rows(), h.Hidden)
	}
	x := make([]float32, h.Hidden)
	for i := range x {
		x[i] = float32(i%7) - 3
	}
	for _, k := range []int{1, h.NumHeads} {
		for _, c := range []struct {
			name string
			h    *Heads
		}{{"int8", h}, {"float32", &f}} {
			b.Run(fmt.Sprintf("heads=%d/%s", k, c.name), func(b *testing.B) {
				var out []float32
				for b.Loop() {
					out = c.h.Logits(x, 1, k, out)
				}
			})
		}
	}
}
