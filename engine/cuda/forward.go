package cuda

import (
	"fmt"
	"math"
	"sync"
	"unsafe"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/kernels"
)

// flatBatch is a batch flattened to tokens in request order.
type flatBatch struct {
	T, R, S, W                   int
	tokens, pos, slots           []int32
	kvoff, kvlen, cached, maskof []int32
	rows                         []int32 // global token index of each logits row
	slotList                     []int32
	mask                         []int32 // uint32 bit rows, stored as int32
	reqRows                      []int   // first logits row of each request
	hrows                        []int32 // global token index of each logits row of the requests with Heads (heads.go)
	// tiles: (first token, tokens) pairs of prefill chunks whose attention
	// runs through attn_tile; rest: the other tokens (nil when tiles is
	// empty: then every token runs through the per-token kernel).
	tiles, rest []int32
}

// AttnTileMin is the fewest new tokens of a chain request whose attention
// runs through attn_tile (prefill chunks); shorter ones (decode tokens,
// short chains) use the per-token split kernel.
const AttnTileMin = 16

// flatten validates reqs and builds the per-token metadata.
func (b *Backend) flatten(reqs []*engine.ForwardRequest) (*flatBatch, error) {
	fb := &b.hostFlat
	*fb = flatBatch{tokens: fb.tokens[:0], pos: fb.pos[:0], slots: fb.slots[:0], kvoff: fb.kvoff[:0],
		kvlen: fb.kvlen[:0], cached: fb.cached[:0], maskof: fb.maskof[:0], rows: fb.rows[:0],
		slotList: fb.slotList[:0], mask: fb.mask[:0], reqRows: fb.reqRows[:0], tiles: fb.tiles[:0], rest: fb.rest[:0],
		hrows: fb.hrows[:0]}
	V, ns := b.cfg.VocabSize, int32(b.opt.NumSlots)
	for ri, r := range reqs {
		n := len(r.Tokens)
		bad := func(format string, a ...any) error {
			return fmt.Errorf("request %d: %s: %w", ri, fmt.Sprintf(format, a...), ErrRequest)
		}
		if n == 0 {
			return nil, bad("no tokens")
		}
		if len(r.Positions) != n || len(r.Slots) != n {
			return nil, bad("Positions %d / Slots %d != Tokens %d", len(r.Positions), len(r.Slots), n)
		}
		if r.Parents != nil && len(r.Parents) != n {
			return nil, bad("Parents %d != Tokens %d", len(r.Parents), n)
		}
		nc := len(r.CachedSlots)
		off := len(fb.slotList)
		for _, s := range r.CachedSlots {
			if s < 0 || s >= ns {
				return nil, fmt.Errorf("request %d: cached slot %d not in [0, %d): %w", ri, s, ns, ErrSlot)
			}
		}
		fb.slotList = append(fb.slotList, r.CachedSlots...)
		for i := 0; i < n; i++ {
			if r.Tokens[i] < 0 || int(r.Tokens[i]) >= V {
				return nil, bad("token %d not in [0, %d)", r.Tokens[i], V)
			}
			if r.Slots[i] < 0 || r.Slots[i] >= ns {
				return nil, fmt.Errorf("request %d: slot %d not in [0, %d): %w", ri, r.Slots[i], ns, ErrSlot)
			}
			if r.Positions[i] < 0 {
				return nil, bad("position %d negative", r.Positions[i])
			}
		}
		fb.slotList = append(fb.slotList, r.Slots...)
		t0 := len(fb.tokens)
		if b.tileTokens > 0 && r.Parents == nil && n >= AttnTileMin {
			for i := 0; i < n; i += b.tileTokens {
				fb.tiles = append(fb.tiles, int32(t0+i), int32(min(b.tileTokens, n-i)))
			}
		} else {
			for i := 0; i < n; i++ {
				fb.rest = append(fb.rest, int32(t0+i))
			}
		}
		wpr := (n + 31) / 32
		for i := 0; i < n; i++ {
			fb.tokens = append(fb.tokens, r.Tokens[i])
			fb.pos = append(fb.pos, r.Positions[i])
			fb.slots = append(fb.slots, r.Slots[i])
			fb.kvoff = append(fb.kvoff, int32(off))
			fb.kvlen = append(fb.kvlen, int32(nc+i+1))
			fb.cached = append(fb.cached, int32(nc))
			if r.Parents == nil {
				fb.maskof = append(fb.maskof, -1)
				continue
			}
			p := r.Parents[i]
			if p < -1 || int(p) >= i {
				return nil, bad("Parents[%d] = %d, want -1 <= p < %d", i, p, i)
			}
			base := len(fb.mask)
			fb.maskof = append(fb.maskof, int32(base))
			for w := 0; w < wpr; w++ {
				fb.mask = append(fb.mask, 0)
			}
			for a := int32(i); a >= 0; a = r.Parents[a] {
				fb.mask[base+int(a)/32] |= int32(uint32(1) << (uint(a) % 32))
			}
		}
		rows := n
		if r.LogitsRows != nil {
			rows = len(r.LogitsRows)
		}
		if r.Sample != nil && rows != 1 {
			return nil, bad("Sample with %d logits rows (want 1)", rows)
		}
		if r.Hidden != nil && len(r.Hidden) < rows*b.cfg.HiddenSize {
			return nil, bad("Hidden holds %d values, want %d rows x %d", len(r.Hidden), rows, b.cfg.HiddenSize)
		}
		fb.reqRows = append(fb.reqRows, len(fb.rows))
		if r.LogitsRows == nil {
			for i := 0; i < n; i++ {
				fb.rows = append(fb.rows, int32(t0+i))
			}
		} else {
			for _, lr := range r.LogitsRows {
				if lr < 0 || int(lr) >= n {
					return nil, bad("LogitsRows entry %d not in [0, %d)", lr, n)
				}
				fb.rows = append(fb.rows, int32(t0)+lr)
			}
		}
		if r.Heads > 0 {
			fb.hrows = append(fb.hrows, fb.rows[fb.reqRows[len(fb.reqRows)-1]:]...)
		}
	}
	fb.T, fb.R, fb.S, fb.W = len(fb.tokens), len(fb.rows), len(fb.slotList), len(fb.mask)
	if len(fb.tiles) == 0 {
		fb.rest = fb.rest[:0]
	}
	if kernels.DebugLaunches {
		if err := checkSlotsDisjoint(reqs); err != nil {
			return nil, err
		}
	}
	return fb, nil
}

// checkSlotsDisjoint (debug builds) enforces the ForwardRequest rule the
// kernels rely on: no new token's slot is a cached slot of the batch.
func checkSlotsDisjoint(reqs []*engine.ForwardRequest) error {
	cached := map[int32]int{}
	for ri, r := range reqs {
		for _, s := range r.CachedSlots {
			cached[s] = ri
		}
	}
	for ri, r := range reqs {
		for _, s := range r.Slots {
			if rj, ok := cached[s]; ok {
				return fmt.Errorf("request %d writes slot %d, which request %d holds as cached: %w", ri, s, rj, ErrSlot)
			}
		}
	}
	return nil
}

// Forward implements engine.Backend.
func (b *Backend) Forward(reqs []*engine.ForwardRequest) error {
	return b.forward(reqs, nil)
}

// Argmaxer is an optional capability of a backend (the CUDA one has it):
// ForwardArgmax runs a forward like engine.Backend.Forward but, instead of
// copying logits to the host, writes the greedy token of each logits row
// (argmax, ties to the lowest id; rows in request order, LogitsRows order
// within a request) into out[:rows]. The requests' Logits are not written.
// out must hold at least the total number of logits rows.
type Argmaxer interface {
	ForwardArgmax(reqs []*engine.ForwardRequest, out []int32) error
}

var _ Argmaxer = (*Backend)(nil)

// ForwardArgmax implements Argmaxer: the argmax runs on the device (inside
// the CUDA graph when the step is graphed) and 4 bytes per row come back.
func (b *Backend) ForwardArgmax(reqs []*engine.ForwardRequest, out []int32) error {
	if out == nil {
		out = []int32{}
	}
	return b.forward(reqs, out)
}

// forward runs reqs; argOut == nil: logits to the requests' Logits, else
// the device argmax of each row to argOut.
func (b *Backend) forward(reqs []*engine.ForwardRequest, argOut []int32) error {
	if b.closed {
		return kernels.ErrClosed
	}
	if len(reqs) == 0 {
		return nil
	}
	return b.dev.Do(func(c *kernels.Ctx) error { return b.forwardOn(c, reqs, argOut) })
}

// forwardOn is forward on the device worker (warmup.go runs many steps in
// one Do).
func (b *Backend) forwardOn(c *kernels.Ctx, reqs []*engine.ForwardRequest, argOut []int32) error {
	argmax := argOut != nil
	{
		fb, err := b.flatten(reqs)
		if err != nil {
			return err
		}
		b.attnMax = 0
		for _, n := range fb.kvlen {
			b.attnMax = max(b.attnMax, int(n))
		}
		lay, stage, err := b.uploadMeta(c, fb)
		if err != nil {
			return err
		}
		if argmax && len(argOut) < fb.R {
			return fmt.Errorf("ForwardArgmax: out holds %d tokens, the batch has %d logits rows: %w", len(argOut), fb.R, ErrRequest)
		}
		if err := b.headsBegin(c, reqs, fb); err != nil { // draft heads, tree argmax (heads.go)
			return err
		}
		defer b.headsFinish(reqs, fb)
		if err := b.runMaybeGraph(c, fb.T, fb.R, lay, argmax || b.hd.wantArg); err != nil {
			return err
		}
		if b.opt.TimeSteps {
			if err := c.Record(b.ev1); err != nil {
				return err
			}
			defer b.recordEnd(c)
		}
		V := b.cfg.VocabSize
		logitsHost := unsafe.Add(stage, b.stageMetaBytes)
		if argmax {
			if fb.R == 0 {
				return nil
			}
			if err := c.DtoHRaw(logitsHost, b.argIdx, fb.R*4); err != nil {
				return err
			}
			if err := c.Sync(); err != nil {
				return err
			}
			copy(argOut, unsafe.Slice((*int32)(logitsHost), fb.R))
			return nil
		}
		nSample, nLogits, hidden := 0, 0, false
		for _, r := range reqs {
			if r.Sample != nil {
				nSample++
			} else if r.Argmax == nil {
				nLogits++
			}
			hidden = hidden || r.Hidden != nil
		}
		if hidden && fb.R > 0 {
			if err := b.hiddenRows(c, fb, lay); err != nil {
				return err
			}
		}
		if nSample > 0 {
			if err := b.sampleRows(c, reqs, fb); err != nil {
				return err
			}
		}
		if fb.R > 0 && nLogits > 0 {
			if err := c.DtoHRaw(logitsHost, b.logits, fb.R*V*4); err != nil {
				return err
			}
		}
		if err := b.headsQueueOut(c, fb); err != nil {
			return err
		}
		if err := c.Sync(); err != nil {
			return err
		}
		if nSample > 0 {
			b.finishSample(reqs, fb)
		}
		if hidden && fb.R > 0 {
			b.finishHidden(reqs, fb)
		}
		if nLogits == 0 {
			return nil
		}
		all := unsafe.Slice((*float32)(logitsHost), fb.R*V)
		for i, r := range reqs {
			if r.Sample != nil || r.Argmax != nil {
				continue
			}
			r0 := fb.reqRows[i]
			r1 := fb.R
			if i+1 < len(reqs) {
				r1 = fb.reqRows[i+1]
			}
			// Like the CPU backend, write into the caller's buffer; allocate
			// one only when it is too short.
			if need := (r1 - r0) * V; len(r.Logits) < need {
				r.Logits = make([]float32, need)
			}
			copy(r.Logits, all[r0*V:r1*V])
		}
		return nil
	}
}

// graphable: the whole step runs through GEMV kernels (no cuBLAS, no host
// decisions), so it can be captured once per (T, R) and replayed.
// Batched steps (more than GemvMaxM tokens, up to MaxGraphTokens, no
// attn_tile prefill tiles) run their cuBLAS GEMMs inside the graph too
// (Options.NoGraphBatched, or SPECGATE_GRAPH_BATCHED=0, turns it off).
func (b *Backend) graphable(c *kernels.Ctx, T, R int) bool {
	cfg := b.cfg
	if b.opt.NoGraphs || R < 1 {
		return false
	}
	if T <= kernels.GemvMaxM && R <= kernels.GemvMaxM &&
		c.GemvFits(T, cfg.HiddenSize) && c.GemvFits(T, cfg.QDim()) && c.GemvFits(T, cfg.IntermediateSize) {
		return true
	}
	// exact steps (exact.go) are GEMVs only, also without cuBLAS
	return !b.opt.NoGraphBatched && b.nTiles == 0 && T <= MaxGraphTokens && R <= MaxGraphTokens &&
		(b.exact || kernels.HasCUBLAS() && !b.opt.NoCUBLAS)
}

// MaxGraphTokens is the largest step captured as a CUDA graph.
const MaxGraphTokens = 64

// graphKey identifies a captured step: tokens, logits rows, device argmax.
type graphKey struct {
	T, R   int
	argmax bool
	multi  bool // a DecodeGreedy step: decode_advance first
	splits int  // attention split blocks per head (b.dev.AttnSplitsFor(b.attnMax))
	heads  int  // the step's draft heads set (heads.go), 0: none
	// exact: the step runs its projections as GEMVs (exact.go). A tree
	// step and a plain batch of the same size differ here: replaying one's
	// graph for the other would run cuBLAS GEMMs in a tree step.
	exact bool
}

func (b *Backend) runMaybeGraph(c *kernels.Ctx, T, R int, lay metaLayout, argmax bool) error {
	b.exact = b.exactStep(c, T) // GEMVs instead of cuBLAS GEMMs (exact.go)
	defer func() { b.exact = false }()
	return b.runMaybeGraphKey(c, graphKey{T, R, argmax, false, b.dev.AttnSplitsFor(b.attnMax), b.headsKey(), b.exact}, lay)
}

// runMaybeGraphKey runs one step: from its CUDA graph when the batch is
// graphable (capturing it the first time), else eagerly.
func (b *Backend) runMaybeGraphKey(c *kernels.Ctx, key graphKey, lay metaLayout) error {
	T, R, argmax := key.T, key.R, key.argmax
	run := func() error {
		if key.multi {
			if err := b.advance(c, lay); err != nil {
				return err
			}
		}
		return b.run(c, T, R, lay, argmax)
	}
	if !b.graphable(c, T, R) || b.noGraph[key] || b.prof != nil {
		return run()
	}
	g := b.graphs[key]
	if g == nil && b.eagerFirst(key) {
		return run() // a shape seen for the first time (backend.go, captureAfter)
	}
	if g == nil {
		// Run once eagerly first: it sets kernel attributes and loads
		// functions outside capture, and produces this step's results.
		if err := run(); err != nil {
			return err
		}
		if err := c.BeginCapture(); err != nil {
			return err
		}
		err := run()
		g2, err2 := c.EndCapture()
		if (err != nil || err2 != nil) && T > kernels.GemvMaxM {
			// a batched step whose cuBLAS calls could not be captured: the
			// eager run's results stand; this shape stays eager.
			c.DestroyGraph(g2)
			if b.noGraph == nil {
				b.noGraph = map[graphKey]bool{}
			}
			b.noGraph[key] = true
			return nil
		}
		if err != nil {
			c.DestroyGraph(g2)
			return err
		}
		if err2 != nil {
			return err2
		}
		b.graphs[key] = g2
		b.graphsMade++
		return nil // results already produced by the eager run
	}
	b.lastGraphHit++
	return c.LaunchGraph(g)
}

// uploadMeta sizes the scratch for fb, writes its metadata to the pinned
// staging buffer and queues the copy to the device (with TimeSteps, after
// the start event). It returns the layout and the staging buffer.
func (b *Backend) uploadMeta(c *kernels.Ctx, fb *flatBatch) (metaLayout, unsafe.Pointer, error) {
	if err := b.ensure(c, fb.T, fb.S, fb.W, max(fb.R, 1)); err != nil {
		return metaLayout{}, nil, err
	}
	lay := layoutFor(b.capT, b.capS, b.capW, b.capR)
	hm := b.hostMeta
	copy(hm[lay.tokens:], fb.tokens)
	copy(hm[lay.pos:], fb.pos)
	copy(hm[lay.slots:], fb.slots)
	copy(hm[lay.kvoff:], fb.kvoff)
	copy(hm[lay.kvlen:], fb.kvlen)
	copy(hm[lay.cached:], fb.cached)
	copy(hm[lay.maskoff:], fb.maskof)
	copy(hm[lay.rows:], fb.rows)
	copy(hm[lay.tiles:], fb.tiles)
	copy(hm[lay.rest:], fb.rest)
	copy(hm[lay.hrows:], fb.hrows)
	b.nTiles, b.nRest = len(fb.tiles)/2, len(fb.rest)
	copy(hm[lay.slotList:], fb.slotList)
	copy(hm[lay.mask:], fb.mask)
	stage := unsafe.Pointer(&b.stage.Bytes()[0])
	if b.opt.TimeSteps {
		if err := b.recordStart(c); err != nil {
			return lay, stage, err
		}
	}
	if err := c.HtoDRaw(b.meta, stage, (lay.slotList+fb.S)*4); err != nil {
		return lay, stage, err
	}
	if fb.W > 0 {
		if err := c.HtoDRaw(b.meta+kernels.DevicePtr(lay.mask*4), unsafe.Add(stage, lay.mask*4), fb.W*4); err != nil {
			return lay, stage, err
		}
	}
	return lay, stage, nil
}

// advance enqueues decode_advance over the one-token metadata at lay.
func (b *Backend) advance(c *kernels.Ctx, lay metaLayout) error {
	mp := func(off int) kernels.DevicePtr { return b.meta + kernels.DevicePtr(off*4) }
	return c.DecodeAdvance(mp(lay.tokens), mp(lay.pos), mp(lay.slots), mp(lay.kvlen), mp(lay.cached), mp(lay.slotList),
		b.argIdx, b.stepOut, b.stepCnt)
}

// MaxDecodeSteps is the most steps one DecodeGreedy call runs.
const MaxDecodeSteps = 256

// Stepper is engine.GreedyStepper (multi-step greedy decoding), which the
// CUDA backend implements with the token fed back on the device.
type Stepper = engine.GreedyStepper

var _ Stepper = (*Backend)(nil)

// DecodeGreedy implements Stepper. The host takes no part between steps:
// each step's graph starts with decode_advance, which feeds the previous
// argmax back on the device and advances the metadata, so one upload, one
// copy back and one wait serve len(slots) tokens (the per-step graph
// launches are queued back to back).
func (b *Backend) DecodeGreedy(token, pos int32, cached, slots []int32, out []int32) error {
	if b.closed {
		return kernels.ErrClosed
	}
	n := len(slots)
	if n < 1 || n > MaxDecodeSteps || len(out) < n {
		return fmt.Errorf("DecodeGreedy: %d steps (want 1..%d), out holds %d: %w", n, MaxDecodeSteps, len(out), ErrRequest)
	}
	req := &engine.ForwardRequest{Tokens: []int32{token}, Positions: []int32{pos}, Slots: slots[:1], CachedSlots: cached}
	return b.dev.Do(func(c *kernels.Ctx) error {
		fb, err := b.flatten([]*engine.ForwardRequest{req})
		if err != nil {
			return err
		}
		for _, s := range slots[1:] {
			if s < 0 || int(s) >= b.opt.NumSlots {
				return fmt.Errorf("DecodeGreedy: slot %d not in [0, %d): %w", s, b.opt.NumSlots, ErrSlot)
			}
		}
		fb.slotList = append(fb.slotList, slots[1:]...)
		fb.S = len(fb.slotList)
		b.attnMax = fb.S // the last step attends to the whole list
		lay, stage, err := b.uploadMeta(c, fb)
		if err != nil {
			return err
		}
		if err := c.Memset32(b.stepCnt, 0, 1); err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			if err := b.runMaybeGraphKey(c, graphKey{1, 1, true, true, b.dev.AttnSplitsFor(b.attnMax), 0, false}, lay); err != nil {
				return err
			}
		}
		// the last step's token (decode_advance would also advance the
		// metadata past the slot list)
		if err := c.DtoD(b.stepOut+kernels.DevicePtr(4*(n-1)), b.argIdx, 4); err != nil {
			return err
		}
		if b.opt.TimeSteps {
			if err := c.Record(b.ev1); err != nil {
				return err
			}
			defer b.recordEnd(c)
		}
		res := unsafe.Add(stage, b.stageMetaBytes)
		if err := c.DtoHRaw(res, b.stepOut, n*4); err != nil {
			return err
		}
		if err := c.Sync(); err != nil {
			return err
		}
		copy(out, unsafe.Slice((*int32)(res), n))
		return nil
	})
}

// run enqueues the forward of T tokens with R logits rows (and, with
// argmax, the argmax of each row into argIdx).
func (b *Backend) run(c *kernels.Ctx, T, R int, lay metaLayout, argmax bool) error {
	cfg := b.cfg
	H, I, V := cfg.HiddenSize, cfg.IntermediateSize, cfg.VocabSize
	nh, nkv, hd := cfg.NumHeads, cfg.NumKVHeads, cfg.HeadDim
	mp := func(off int) kernels.DevicePtr { return b.meta + kernels.DevicePtr(off*4) }
	am := kernels.AttnMeta{SlotList: mp(lay.slotList), KVOff: mp(lay.kvoff), KVLen: mp(lay.kvlen),
		Cached: mp(lay.cached), MaskOff: mp(lay.maskoff), Mask: mp(lay.mask), MaxLen: b.attnMax}
	scale := float32(1 / math.Sqrt(float64(hd)))
	layerBytes := kernels.DevicePtr(b.opt.NumSlots * b.kvDim * 4)
	if err := b.profStart(c); err != nil { // stage profile (prof.go)
		return err
	}
	if err := c.Embed(b.embed, mp(lay.tokens), b.x, T, H); err != nil {
		return err
	}
	// Every kernel after the embedding may start during its predecessor's
	// tail (programmatic dependent launch; kernels.Ctx.SetPDL).
	c.SetPDL(!b.opt.NoPDL)
	defer c.SetPDL(false)
	fused := T <= kernels.GemvMaxM && c.GemvFits(T, H) && !cfg.QKVBias // biases add before RoPE
	if err := b.mark(c, "embed"); err != nil {
		return err
	}
	for l := range b.layers {
		ly := &b.layers[l]
		kc, vc := b.kc+kernels.DevicePtr(l)*layerBytes, b.vc+kernels.DevicePtr(l)*layerBytes
		if b.exact || fused && ly.wqkv.s == 0 {
			// one launch for all T tokens (a 2-D grid above GemvMaxM: exact.go)
			if err := c.GemvQKVRope(ly.wqkv.w, b.x, 0, ly.attnNorm, b.eps, b.qkv, mp(lay.pos), mp(lay.slots), b.inv,
				kc, vc, T, H, nh, nkv, hd); err != nil {
				return fmt.Errorf("layer %d qkv+rope: %w", l, err)
			}
		} else if fused && ly.wqkv.s != 0 {
			if err := b.qkvRopeQ(c, ly.wqkv, b.x, ly.attnNorm, b.qkv, mp(lay.pos), mp(lay.slots), b.inv,
				kc, vc, T, H, nh, nkv, hd); err != nil { // int8 or int4 (quant.go)
				return fmt.Errorf("layer %d qkv+rope: %w", l, err)
			}
		} else {
			if err := b.mmQ(c, kernels.GemvNorm, ly.wqkv, b.x, 0, ly.attnNorm, b.gu, T, b.qkvDim, H); err != nil {
				return fmt.Errorf("layer %d qkv: %w", l, err)
			}
			if ly.bqkv != 0 {
				if err := c.AddBiasRows(b.gu, ly.bqkv, b.qkvDim, T); err != nil {
					return fmt.Errorf("layer %d qkv bias: %w", l, err)
				}
			}
			if err := c.RopeAppendPerm(b.gu, b.qkv, mp(lay.pos), mp(lay.slots), b.inv, kc, vc, T, nh, nkv, hd); err != nil {
				return fmt.Errorf("layer %d rope: %w", l, err)
			}
		}
		if err := b.mark(c, "qkv"); err != nil {
			return err
		}
		if err := b.attention(c, am, lay, kc, vc, T, scale); err != nil {
			return fmt.Errorf("layer %d attention: %w", l, err)
		}
		if err := b.mark(c, "attention"); err != nil {
			return err
		}
		if err := b.mmQ(c, kernels.GemvResid, ly.wo, b.attn, 0, 0, b.x, T, H, cfg.QDim()); err != nil {
			return fmt.Errorf("layer %d o_proj: %w", l, err)
		}
		if err := b.mark(c, "o_proj"); err != nil {
			return err
		}
		if err := b.mmQ(c, kernels.GemvSwiGLU, ly.wgu, b.x, 0, ly.mlpNorm, b.act, T, 2*I, H); err != nil {
			return fmt.Errorf("layer %d gate/up: %w", l, err)
		}
		if err := b.mark(c, "gate_up"); err != nil {
			return err
		}
		if err := b.mmQ(c, kernels.GemvResid, ly.wd, b.act, 0, 0, b.x, T, H, I); err != nil {
			return fmt.Errorf("layer %d down: %w", l, err)
		}
		if err := b.mark(c, "down"); err != nil {
			return err
		}
	}
	if R == 0 {
		return nil
	}
	if err := b.mmQ(c, kernels.GemvNorm, b.lmHeadQ, b.x, mp(lay.rows), b.norm, b.logits, R, V, H); err != nil {
		return fmt.Errorf("lm_head: %w", err)
	}
	if err := b.mark(c, "lm_head"); err != nil {
		return err
	}
	if argmax {
		if err := c.ArgmaxRows(b.logits, b.argIdx, R, V); err != nil {
			return fmt.Errorf("argmax: %w", err)
		}
		if err := b.mark(c, "argmax"); err != nil {
			return err
		}
	}
	if err := b.runHeads(c, R, lay); err != nil {
		return fmt.Errorf("draft heads: %w", err)
	}
	return b.mark(c, "heads")
}

// attention queues one layer's attention: the per-token split kernel for
// every token, or, when the batch has prefill tiles (b.nTiles), attn_tile
// for them and the split kernel for the rest.
func (b *Backend) attention(c *kernels.Ctx, am kernels.AttnMeta, lay metaLayout, kc, vc kernels.DevicePtr, T int, scale float32) error {
	cfg := b.cfg
	nh, nkv, hd := cfg.NumHeads, cfg.NumKVHeads, cfg.HeadDim
	if b.nTiles == 0 {
		return c.Attention(b.qkv, b.attn, kc, vc, am, T, nh, nkv, hd, scale)
	}
	if b.nRest > 0 {
		am.TokIdx = b.meta + kernels.DevicePtr(lay.rest*4)
		if err := c.Attention(b.qkv, b.attn, kc, vc, am, b.nRest, nh, nkv, hd, scale); err != nil {
			return err
		}
	}
	return c.AttnTile(b.qkv, b.attn, kc, vc, am, b.meta+kernels.DevicePtr(lay.tiles*4), b.nTiles, nh, nkv, hd, scale)
}

// mm computes one projection of M rows (see kernels.GemvKind): GEMV when M
// fits, cuBLAS for larger M when available, else GEMV in chunks.
func (b *Backend) mm(c *kernels.Ctx, kind kernels.GemvKind, W, X, xrow, nw, Y kernels.DevicePtr, M, N, K int) error {
	if M <= kernels.GemvMaxM && c.GemvFits(M, K) || b.exact && c.GemvWideFits(M, K) {
		return c.Gemv(kind, W, X, xrow, nw, b.eps, Y, M, N, K) // 2-D launch above GemvMaxM (exact.go)
	}
	outW := N
	if kind == kernels.GemvSwiGLU {
		outW = N / 2
	}
	if kernels.HasCUBLAS() && !b.opt.NoCUBLAS && !b.exact {
		switch kind {
		case kernels.GemvNorm, kernels.GemvSwiGLU:
			if err := c.RMSNormF16(X, xrow, nw, b.eps, b.h16, M, K); err != nil {
				return err
			}
		default:
			if xrow != 0 {
				return fmt.Errorf("mm: row index with kind %d: %w", kind, kernels.ErrBadArg)
			}
			if err := c.CastF16(X, b.h16, M*K); err != nil {
				return err
			}
		}
		switch kind {
		case kernels.GemvResid:
			return c.GemmF16(W, b.h16, Y, M, N, K, 1, 1)
		case kernels.GemvSwiGLU:
			if err := c.GemmF16(W, b.h16, b.gu, M, N, K, 1, 0); err != nil {
				return err
			}
			return c.SwiGLU(b.gu, Y, outW, M)
		default:
			return c.GemmF16(W, b.h16, Y, M, N, K, 1, 0)
		}
	}
	step := kernels.GemvMaxM
	for step > 0 && !c.GemvFits(step, K) {
		step--
	}
	if step == 0 {
		return fmt.Errorf("mm: K=%d does not fit shared memory and cuBLAS is absent: %w", K, kernels.ErrBadArg)
	}
	for m0 := 0; m0 < M; m0 += step {
		m := min(step, M-m0)
		x, xr := X, xrow
		if xrow != 0 {
			xr += kernels.DevicePtr(m0 * 4)
		} else {
			x += kernels.DevicePtr(m0 * K * 4)
		}
		if err := c.Gemv(kind, W, x, xr, nw, b.eps, Y+kernels.DevicePtr(m0*outW*4), m, N, K); err != nil {
			return err
		}
	}
	return nil
}

// CopySlots implements engine.Backend: for every layer, K and V of slot
// src[i] are copied to dst[i]. All sources are read before any destination
// is written, so overlapping sets are safe.
func (b *Backend) CopySlots(src, dst []int32) error {
	if len(src) != len(dst) {
		return fmt.Errorf("CopySlots: %d sources, %d destinations: %w", len(src), len(dst), ErrRequest)
	}
	n := len(src)
	if n == 0 {
		return nil
	}
	ns := int32(b.opt.NumSlots)
	for i := range src {
		if src[i] < 0 || src[i] >= ns || dst[i] < 0 || dst[i] >= ns {
			return fmt.Errorf("CopySlots: pair %d (%d -> %d) not in [0, %d): %w", i, src[i], dst[i], ns, ErrSlot)
		}
	}
	return b.dev.Do(func(c *kernels.Ctx) error {
		L, kv := b.cfg.NumLayers, b.kvDim
		need := n*L*kv*4 + 2*n*4
		if need > b.tmpKVCap {
			c.Free(b.tmpKV)
			b.tmpKV, b.tmpKVCap = 0, 0
			p, err := c.Alloc(need)
			if err != nil {
				return err
			}
			b.tmpKV, b.tmpKVCap = p, need
		}
		idx := b.tmpKV + kernels.DevicePtr(n*L*kv*4)
		both := append(append(make([]int32, 0, 2*n), src...), dst...)
		if err := kernels.Upload(c, idx, both); err != nil {
			return err
		}
		stride := int64(b.opt.NumSlots * kv)
		for _, cache := range []kernels.DevicePtr{b.kc, b.vc} {
			if err := c.KVGather(cache, b.tmpKV, idx, n, L, kv, stride); err != nil {
				return err
			}
			if err := c.KVScatter(cache, b.tmpKV, idx+kernels.DevicePtr(n*4), n, L, kv, stride); err != nil {
				return err
			}
		}
		return c.Sync()
	})
}

// Stats reports graph use: graphs captured and replays.
func (b *Backend) Stats() (graphs, replays int) { return b.graphsMade, b.lastGraphHit }

// recordStart (TimeSteps) records the start event, creating the events on first use.
func (b *Backend) recordStart(c *kernels.Ctx) error {
	if b.ev0 == 0 {
		var err error
		if b.ev0, err = c.NewEvent(); err != nil {
			return err
		}
		if b.ev1, err = c.NewEvent(); err != nil {
			return err
		}
	}
	return c.Record(b.ev0)
}

// recordEnd (TimeSteps, after the forward's final Sync) keeps the device
// time between the two events.
func (b *Backend) recordEnd(c *kernels.Ctx) {
	if ms, err := c.ElapsedMs(b.ev0, b.ev1); err == nil {
		b.stepTimes.add(float64(ms) / 1e3)
	}
}

// stepTimeLog is the TimeSteps log: the engine's loop appends (recordEnd)
// while a benchmark's goroutine takes it (StepTimes), so it has its own
// lock.
type stepTimeLog struct {
	mu sync.Mutex
	s  []float64
}

func (l *stepTimeLog) add(sec float64) {
	l.mu.Lock()
	l.s = append(l.s, sec)
	l.mu.Unlock()
}

func (l *stepTimeLog) take() []float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.s
	l.s = nil
	return t
}

// StepTimes returns and clears the device seconds of each forward since the
// last call (Options.TimeSteps): metadata upload plus kernels, from the
// first to the last command the forward queued before copying results back.
// Safe to call while the backend steps (from another goroutine).
func (b *Backend) StepTimes() []float64 {
	return b.stepTimes.take()
}
