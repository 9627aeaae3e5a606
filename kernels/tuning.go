package kernels

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Tuning holds the kernel tuning knobs of one Device: which GEMV family
// runs, launch shapes, split attention, programmatic dependent launch and
// the worker's hand-off polling. Every Device owns its copy (OpenTuned);
// nothing in this package reads a tuning knob from the environment
// (WithEnv is the explicit mapping a command may apply). Zero values pick
// the defaults, which are the fastest configuration measured on an H100
// (docs/cuda.md, docs/device-notes.md). Every choice gives the same bits
// (the knobs change speed, never results), except GemvMMA, which picks the
// arithmetic of the projections (the same for every batch size).
type Tuning struct {
	// Gemv is the fp16 GEMV family at batch 1: GemvShallow (the default,
	// ""), GemvDeep or GemvRing (see the constants).
	Gemv string
	// GemvI8 is the int8 GEMV family at batch 1: GemvI8Hybrid8 (the
	// default, "": fastest decode measured, docs/quantization.md) or
	// another of GemvI8Families. Other batch sizes always run the deep
	// kernels.
	GemvI8 string
	// NoGemvI8Wave: batch-1 int8 GEMVs keep gemvGrid's grid even when it
	// takes more than one wave of resident blocks (by default they get
	// more units per warp instead: LM head 29.9 -> 25.2 us on an H100).
	NoGemvI8Wave bool
	// GemvWarps fixes the warps per GEMV block: 8 (the default, 0), 4 or
	// 2; GemvWarpsAuto picks per matrix (gemvGrid), measured slower in
	// decode on an H100 (816 vs 865 tokens/s, docs/cuda.md).
	GemvWarps int
	// NoGemvSpread: GEMV launches of 2..64 tokens whose grid has fewer
	// blocks than the device has SMs keep chunks of up to GemvMaxM tokens
	// instead of spreading over more, smaller chunks (ops_wide.go).
	NoGemvSpread bool
	// GemvMMA picks the fp16 projection family: GemvMMAOn the tensor-core
	// kernels (ops_mma.go) for every matrix whose shape they take,
	// GemvMMAOff the CUDA-core GEMVs, 0 (the default) by the measured
	// per-shape rule of useMMA (tensor cores for matrices of mmaAutoMinK
	// to mmaAutoMaxK columns: every projection of the shipped 12.6 M
	// target; CUDA-core for the others, e.g. the 1.1B shape). Unlike the other
	// knobs it changes results (fp16 inputs to the tensor cores), never
	// between batch sizes: the choice depends on the matrix shape only, so
	// plain and tree steps of one model always run each matrix on the same
	// family and exact verification holds either way.
	GemvMMA int
	// GemvMMATiles: the block rows of tensor-core launches of more than 8
	// tokens: 1 (the default, 0; round 10) rows of 8 tokens, each block
	// the one-token kernel (gemv_mma_*_t1) over its 8 tokens; 2 rows of 16
	// tokens (t2, round 9's default above 8 tokens); 4 rows of 64 tokens
	// above 16 tokens (t8, each weight chunk loaded once for up to 64
	// tokens: measured slower in rounds 8-9), 16 for 9..16. Same bits.
	GemvMMATiles int
	// GemvPrefetch makes each GEMV block prefetch its weight rows to L2
	// before loading its inputs: cost 9% of decode speed on an H100.
	GemvPrefetch bool
	// GemvRingBlocksPerSM caps the ring GEMV's blocks per SM (1..8; 0: as
	// many as fit, so all blocks are resident).
	GemvRingBlocksPerSM int
	// GemvRingWarps is the ring GEMV's warps per block (2..8; 0: 8).
	GemvRingWarps int
	// GemvRingMinK: with the ring family, GEMVs with fewer inputs than
	// this use the deep kernels (0: none do).
	GemvRingMinK int
	// AttnSplits is the most split-attention blocks per (token, head)
	// (1..64; 0: 8; 1 turns splitting off) and AttnSplitMinKeys the keys
	// per split (0: 256). See Ctx.Attention.
	AttnSplits, AttnSplitMinKeys int
	// AttnGroupMin: attention launches of at least this many tokens run
	// all query heads of a KV head in one block (ops_attn_g.go; same bits);
	// 0: those whose tokens x heads exceed the SMs; -1: never.
	AttnGroupMin int
	// AttnGroupR7 runs round 7's grouped attention kernel where the grouped
	// kernel runs for head dim 64 and G 3 (the shipped target), for A/B
	// runs against round 11's (llama_attn_g.cu; same bits).
	AttnGroupR7 bool
	// NoAttnPreload: attention waits for the QKV kernel before reading
	// its metadata and cached keys (see Ctx.Attention).
	NoAttnPreload bool
	// NoPDL: never launch with programmatic dependent launch (SetPDL
	// then has no effect).
	NoPDL bool
	// HandoffSpin is how long the GPU worker polls for the next request
	// after one, and how long Do polls for its result, before blocking
	// (0: 5 ms; negative: always block). A blocked goroutine is woken
	// through the OS scheduler (tens of µs per wake on a VM; two per Do),
	// which a decode loop pays on every step; 5 ms is longer than a decode
	// step of a 1B model. Polling runs only with 4 or more Ps (the polling
	// worker holds its P).
	HandoffSpin time.Duration
	// KernelDefines are extra NVRTC options (e.g. "-DGEMV_STAGE_G=4") for
	// experiments with the tuning macros in llama.cu; part of the disk
	// cache key. Applied when the Device opens.
	KernelDefines []string
}

// GemvWarpsAuto as Tuning.GemvWarps picks the warps per block per matrix.
const GemvWarpsAuto = -1

// DefaultHandoffSpin is Tuning.HandoffSpin's default.
const DefaultHandoffSpin = 5 * time.Millisecond

// withDefaults returns t with its zero values replaced by the defaults,
// or an error naming the first knob out of range.
func (t Tuning) withDefaults() (Tuning, error) {
	bad := func(knob string, v any) (Tuning, error) {
		return t, fmt.Errorf("kernels: tuning %s = %v: %w", knob, v, ErrBadArg)
	}
	switch t.Gemv {
	case "":
		t.Gemv = GemvShallow
	case GemvShallow, GemvDeep, GemvRing:
	default:
		return bad("Gemv", t.Gemv)
	}
	if t.GemvI8 == "" {
		t.GemvI8 = GemvI8Hybrid8
	}
	if _, ok := gemvI8Suffix[t.GemvI8]; !ok {
		return bad("GemvI8", t.GemvI8)
	}
	switch t.GemvWarps {
	case 0:
		t.GemvWarps = 8
	case 2, 4, 8, GemvWarpsAuto:
	default:
		return bad("GemvWarps", t.GemvWarps)
	}
	if t.GemvMMA < GemvMMAOff || t.GemvMMA > GemvMMAOn {
		return bad("GemvMMA", t.GemvMMA)
	}
	switch t.GemvMMATiles {
	case 0:
		t.GemvMMATiles = 1
	case 1, mmaRows16, mmaTiles:
	default:
		return bad("GemvMMATiles", t.GemvMMATiles)
	}
	if t.AttnGroupMin < -1 {
		return bad("AttnGroupMin", t.AttnGroupMin)
	}
	// knob: 0 takes def, else v must lie in [lo, hi]
	for _, k := range []struct {
		name        string
		v           *int
		def, lo, hi int
	}{{"GemvRingBlocksPerSM", &t.GemvRingBlocksPerSM, 0, 0, 8}, {"GemvRingWarps", &t.GemvRingWarps, 8, 2, 8},
		{"GemvRingMinK", &t.GemvRingMinK, 0, 0, math.MaxInt}, {"AttnSplits", &t.AttnSplits, 8, 1, 64},
		{"AttnSplitMinKeys", &t.AttnSplitMinKeys, 256, 1, math.MaxInt}} {
		switch {
		case *k.v == 0:
			*k.v = k.def
		case *k.v < k.lo || *k.v > k.hi:
			return bad(k.name, *k.v)
		}
	}
	if t.HandoffSpin == 0 {
		t.HandoffSpin = DefaultHandoffSpin
	}
	t.KernelDefines = append([]string(nil), t.KernelDefines...)
	return t, nil
}

// The environment variables WithEnv maps (A/B runs of benchmarks).
const (
	EnvGemv          = "SPECGATE_GEMV"            // shallow | deep | ring: Gemv
	EnvGemvDeep      = "SPECGATE_GEMV_DEEP"       // "1" (the round-3 switch): Gemv deep, unless SPECGATE_GEMV is set
	EnvGemvI8        = "SPECGATE_GEMV_I8"         // one of GemvI8Families: GemvI8
	EnvGemvI8Wave    = "SPECGATE_GEMV_I8_WAVE"    // "0": NoGemvI8Wave, "1": not
	EnvGemvWarps     = "SPECGATE_GEMV_WARPS"      // 8 | 4 | 2 | auto: GemvWarps
	EnvGemvPrefetch  = "SPECGATE_GEMV_PREFETCH"   // "1": GemvPrefetch
	EnvGemvSpread    = "SPECGATE_GEMV_SPREAD"     // "0": NoGemvSpread
	EnvGemvMMA       = "SPECGATE_GEMV_MMA"        // on | off: GemvMMA
	EnvGemvMMATiles  = "SPECGATE_GEMV_MMA_TILES"  // 1 | 2 | 4: GemvMMATiles
	EnvGemvRingBPS   = "SPECGATE_GEMV_RING_BPS"   // 0..8: GemvRingBlocksPerSM
	EnvGemvRingWarps = "SPECGATE_GEMV_RING_WARPS" // 2..8: GemvRingWarps
	EnvGemvRingMinK  = "SPECGATE_GEMV_RING_MINK"  // GemvRingMinK
	EnvAttnSplits    = "SPECGATE_ATTN_SPLITS"     // 1..64: AttnSplits
	EnvAttnKMin      = "SPECGATE_ATTN_KMIN"       // AttnSplitMinKeys
	EnvAttnPreload   = "SPECGATE_ATTN_PRELOAD"    // "0": NoAttnPreload
	EnvAttnGroupMin  = "SPECGATE_ATTN_GROUP_MIN"  // -1 | 1..: AttnGroupMin
	PDLEnv           = "SPECGATE_PDL"             // "0": NoPDL
	EnvHandoffSpinUS = "SPECGATE_GPU_SPIN_US"     // µs, 0: always block: HandoffSpin
	KernelDefinesEnv = "SPECGATE_KERNEL_DEFINES"  // space-separated NVRTC options: KernelDefines
)

// WithEnv returns t with the knobs that getenv (os.Getenv, at a command's
// edge) sets to a valid value applied over it; unset or invalid values
// leave t's value. It is the only bridge from the environment to a
// Device's tuning, and only commands opt into it.
func (t Tuning) WithEnv(getenv func(string) string) Tuning {
	intIn := func(name string, lo, hi int, dst *int) {
		if v, err := strconv.Atoi(getenv(name)); err == nil && v >= lo && v <= hi {
			*dst = v
		}
	}
	switch v := getenv(EnvGemv); v {
	case GemvShallow, GemvDeep, GemvRing:
		t.Gemv = v
	default:
		if getenv(EnvGemvDeep) == "1" {
			t.Gemv = GemvDeep
		}
	}
	if v := getenv(EnvGemvI8); v != "" {
		if _, ok := gemvI8Suffix[v]; ok {
			t.GemvI8 = v
		}
	}
	switch getenv(EnvGemvI8Wave) {
	case "0":
		t.NoGemvI8Wave = true
	case "1":
		t.NoGemvI8Wave = false
	}
	switch v := getenv(EnvGemvWarps); v {
	case "auto":
		t.GemvWarps = GemvWarpsAuto
	case "2", "4", "8":
		t.GemvWarps, _ = strconv.Atoi(v)
	}
	if getenv(EnvGemvPrefetch) == "1" {
		t.GemvPrefetch = true
	}
	if getenv(EnvGemvSpread) == "0" {
		t.NoGemvSpread = true
	}
	switch getenv(EnvGemvMMA) {
	case "on":
		t.GemvMMA = GemvMMAOn
	case "off":
		t.GemvMMA = GemvMMAOff
	}
	switch v := getenv(EnvGemvMMATiles); v {
	case "1", "2", "4":
		t.GemvMMATiles, _ = strconv.Atoi(v)
	}
	intIn(EnvGemvRingBPS, 0, 8, &t.GemvRingBlocksPerSM)
	intIn(EnvGemvRingWarps, 2, 8, &t.GemvRingWarps)
	intIn(EnvGemvRingMinK, 0, 1<<20, &t.GemvRingMinK)
	intIn(EnvAttnSplits, 1, 64, &t.AttnSplits)
	intIn(EnvAttnKMin, 1, 1<<20, &t.AttnSplitMinKeys)
	intIn(EnvAttnGroupMin, -1, 1<<20, &t.AttnGroupMin)
	if getenv(EnvAttnPreload) == "0" {
		t.NoAttnPreload = true
	}
	if getenv(PDLEnv) == "0" {
		t.NoPDL = true
	}
	spin := -2
	intIn(EnvHandoffSpinUS, 0, 1<<30, &spin)
	switch {
	case spin == 0:
		t.HandoffSpin = -1
	case spin > 0:
		t.HandoffSpin = time.Duration(spin) * time.Microsecond
	}
	if f := strings.Fields(getenv(KernelDefinesEnv)); len(f) > 0 {
		t.KernelDefines = f
	}
	return t
}

// Tuning returns the device's tuning (defaults filled in).
func (d *Device) Tuning() Tuning {
	t := d.tune
	t.KernelDefines = append([]string(nil), t.KernelDefines...)
	return t
}

// SetTuning replaces the launch knobs of the device (everything but
// HandoffSpin and KernelDefines, which are fixed when it opens) and
// returns the previous tuning; tests and benchmarks use it to run several
// families on one device. Only from inside Do (the launchers read the
// tuning on the worker).
func (c *Ctx) SetTuning(t Tuning) (Tuning, error) {
	prev := c.d.tune
	t.HandoffSpin, t.KernelDefines = prev.HandoffSpin, prev.KernelDefines
	t, err := t.withDefaults()
	if err != nil {
		return prev, err
	}
	c.d.tune = t
	if t.NoPDL {
		c.d.pdl = false
	}
	return prev, nil
}

// AttnSplitsFor is the split blocks per head an attention launch needs
// when no token has more than maxLen keys: ceil(maxLen /
// AttnSplitMinKeys) rounded up to a power of two (so few distinct launch
// shapes, e.g. CUDA graphs, exist), at most AttnSplits; AttnSplits when
// maxLen <= 0.
func (d *Device) AttnSplitsFor(maxLen int) int {
	return attnSplitsFor(maxLen, d.tune.AttnSplits, d.tune.AttnSplitMinKeys)
}

func attnSplitsFor(maxLen, splits, minKeys int) int {
	if maxLen <= 0 {
		return splits
	}
	need := (maxLen + minKeys - 1) / minKeys
	s := 1
	for s < need && s < splits {
		s *= 2
	}
	return min(s, splits)
}
