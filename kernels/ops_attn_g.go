package kernels

import "fmt"

// Grouped attention (attention_g in llama_attn_g.cu): all G = nh/nkv query
// heads of a KV head in one block (grid T x nkv instead of T x nh), each
// key and value row loaded once for G heads, every head's arithmetic that
// of the per-head kernel (same bits: TestRopeAttention, and
// TestExactTreeMatchesPlainOnGPU at contexts of 100 and 600 keys). The
// per-head kernel holds 238 registers (one 256-thread block per SM), so a
// launch of more than one block per SM runs in waves: by default
// (Tuning.AttnGroupMin 0) the grouped kernel runs when T x nh exceeds the
// SMs. Measured on an H100 (docs/cuda.md round 7, shipped target, context
// 100, 6 layers, eager): per-head / grouped 53.8 / 68.9 µs at 17 tokens
// (one wave: grouping only serialises heads), 77.1 / 70.0 at 24, 84.5 /
// 71.2 at 33, 130.0 / 86.1 at 64; round 11 (no register spills, one
// barrier pair for the G block maxima) 85.5 -> 72.1-72.4 at 64 (graph step
// 182 -> 168 µs). Built for head dims 64 and 128 with G in attnGroups.

var attnGroups = map[int][]int{64: {2, 3, 4}, 128: {2, 4}}

// attnGroup is the heads per block of an attention launch of T tokens: G
// when the grouped kernel serves it, else 1.
func (c *Ctx) attnGroup(T, nh, nkv, hd int) int {
	mn := c.d.tune.AttnGroupMin
	switch {
	case mn < 0 || nkv < 1 || nh%nkv != 0 || nh == nkv:
		return 1
	case mn == 0 && T*nh <= max(c.d.SMs, 1):
		return 1
	case mn > 0 && T < mn:
		return 1
	}
	g := nh / nkv
	for _, v := range attnGroups[hd] {
		if v == g {
			return g
		}
	}
	return 1
}

// attnGroupName is the grouped kernel for G heads per block at head dim
// hd: round 7's code for G 3 at head dim 64 under Tuning.AttnGroupR7.
func (c *Ctx) attnGroupName(g, hd int) string {
	if c.d.tune.AttnGroupR7 && g == 3 && hd == 64 {
		return "attention_g3_hd64_r7"
	}
	return fmt.Sprintf("attention_g%d_hd%d", g, hd)
}
