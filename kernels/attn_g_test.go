package kernels

import (
	"regexp"
	"slices"
	"strconv"
	"testing"
)

// TestAttnGroupKernelsBuilt: every (head dim, G) that attnGroup may pick
// has its attention_g<G>_hd<HD> instantiated in llama_attn_g.cu and the
// reverse (a pick without a kernel fails only at launch, on a GPU, for a
// model of that shape).
func TestAttnGroupKernelsBuilt(t *testing.T) {
	src, err := sources.ReadFile("llama_attn_g.cu")
	if err != nil {
		t.Fatal(err)
	}
	built := map[int][]int{}
	for _, m := range regexp.MustCompile(`(?m)^ATTNG_INST\((\d+), (\d+)\)`).FindAllSubmatch(src, -1) {
		hd, _ := strconv.Atoi(string(m[1]))
		g, _ := strconv.Atoi(string(m[2]))
		built[hd] = append(built[hd], g)
	}
	if len(built) == 0 {
		t.Fatal("no ATTNG_INST lines in llama_attn_g.cu")
	}
	for hd, gs := range attnGroups {
		if !slices.Equal(built[hd], gs) {
			t.Errorf("head dim %d: attnGroups %v, built %v", hd, gs, built[hd])
		}
	}
	for hd, gs := range built {
		if attnGroups[hd] == nil {
			t.Errorf("head dim %d: built %v, not in attnGroups", hd, gs)
		}
	}
}

// TestAttnGroup: which launches take the grouped kernel (132 SMs: an H100).
func TestAttnGroup(t *testing.T) {
	for _, c := range []struct {
		min, T, nh, nkv, hd, want int
	}{
		{0, 64, 6, 2, 64, 3},    // the shipped target's tree step: 384 pairs > 132 SMs
		{0, 22, 6, 2, 64, 1},    // 132 pairs: one wave, per-head
		{0, 23, 6, 2, 64, 3},    // 138 pairs
		{0, 64, 32, 8, 128, 4},  // Llama-3-8B-like
		{0, 64, 24, 8, 128, 1},  // G 3 at head dim 128: not built
		{0, 64, 32, 4, 64, 1},   // G 8: not built
		{0, 64, 8, 8, 64, 1},    // no GQA
		{0, 64, 6, 4, 64, 1},    // nh not a multiple of nkv
		{0, 64, 6, 0, 64, 1},    // no KV heads
		{-1, 64, 6, 2, 64, 1},   // off
		{2, 2, 6, 2, 64, 3},     // from 2 tokens
		{2, 1, 6, 2, 64, 1},     // one token
		{40, 33, 32, 8, 128, 1}, // below AttnGroupMin, whatever the SMs
		{0, 64, 4, 2, 128, 2},
		{0, 64, 6, 2, 32, 1}, // head dim 32: not built
	} {
		c0 := &Ctx{d: &Device{SMs: 132, tune: mustDefaults(t, Tuning{AttnGroupMin: c.min})}}
		if got := c0.attnGroup(c.T, c.nh, c.nkv, c.hd); got != c.want {
			t.Errorf("%+v: attnGroup %d", c, got)
		}
	}
}
