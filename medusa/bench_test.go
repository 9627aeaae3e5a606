package medusa

import (
	"fmt"
	"testing"
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
