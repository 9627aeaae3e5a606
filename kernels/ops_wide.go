package kernels

// GemvWideMaxM is the most tokens one Gemv or GemvQKVRope launch takes.
// Launches of more than GemvMaxM tokens run as a 2-D grid: block row y
// computes one chunk of at most GemvMaxM tokens (GemvChunk) with the
// kernel of that chunk size, exactly as a launch over those tokens alone
// would, so every token gets the bits it gets at batch 1 (exact tree
// verification; engine/cuda exact.go) from one launch instead of one launch
// per chunk.
const GemvWideMaxM = 64

// GemvChunk splits M tokens into nch chunks of at most mb <= GemvMaxM
// tokens each (the last one may be shorter), as even as possible: 9 tokens
// are 2 chunks of 5 (the kernel of 5 tokens), not 8 + 1.
func GemvChunk(M int) (mb, nch int) {
	if M <= GemvMaxM {
		return M, 1
	}
	nch = (M + GemvMaxM - 1) / GemvMaxM
	return (M + nch - 1) / nch, nch
}

// GemvWideFits reports whether a GEMV of M (1..GemvWideMaxM) tokens over
// K inputs fits this device's shared memory (its largest chunk does).
func (c *Ctx) GemvWideFits(M, K int) bool {
	if M < 1 || M > GemvWideMaxM {
		return false
	}
	mb, _ := GemvChunk(M)
	return c.GemvFits(mb, K)
}

// Spin queues a kernel that busy-waits ns nanoseconds on the device
// (profiling: the host can queue a whole step behind it, so the events
// between the step's kernels measure device time, not launch gaps).
func (c *Ctx) Spin(ns int64) error {
	return c.LaunchByName("spin_ns", Dim3{1, 1, 1}, Dim3{1, 1, 1}, 0, uint64(ns))
}

// Spreading (Tuning.NoGemvSpread turns it off): a launch of M tokens whose
// grid would have fewer blocks than the device has SMs (a small model's
// projections: 40-48 blocks for the shipped target's qkv, o_proj and down)
// is split into more, smaller token chunks (2-D launch), e.g. 8 tokens as
// 4 chunks of 2, so more SMs share the work and each warp's chain is
// shorter. Same bits: every chunk size gives each token the bits it gets
// alone. Measured on an H100 (docs/cuda.md, session 4): an 8-token tree
// step of the shipped target 174 -> 132 µs.

// gemvSplit picks the token chunks (mb tokens, nch chunks) of a GEMV of M
// tokens over K inputs and units output units.
func (c *Ctx) gemvSplit(M, K, units int) (mb, nch int) {
	mb, nch = GemvChunk(M)
	if c.d.tune.NoGemvSpread || M <= 1 {
		return mb, nch
	}
	grid, _, _ := c.gemvGrid(units, GemvSmem(mb, K))
	sms := max(c.d.SMs, 1)
	if want := min(M, (sms+grid-1)/grid); want > nch {
		nch = want
		mb = (M + nch - 1) / nch
		nch = (M + mb - 1) / mb
	}
	return mb, nch
}
