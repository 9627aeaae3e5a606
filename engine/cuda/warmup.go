package cuda

import (
	"context"
	"fmt"
	"time"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/kernels"
)

// Start-up graph warm-up. A step shape is captured as a CUDA graph at its
// second sighting (captureAfter); before that it runs eagerly, and the
// capture itself costs the host ~2.6 ms. A fresh server meets every tree
// size and batch size cold, so its first verification steps cost 0.6-1.2 ms
// of device time instead of 0.17-0.3 ms (docs/device-notes.md, drafts).
// Warmup captures the shapes a server steps through before it takes
// requests, as vLLM and SGLang capture their decode batch sizes at start-up.
//
// The graph key (forward.go graphKey) is (tokens, logits rows, device
// argmax, multi-step, attention splits, heads set and rows, exact). Warmup
// runs, for every attention split count a context up to MaxContext can
// reach (kernels.Device.AttnSplitsFor):
//   - plain decode batches: n one-token requests, n = 1..MaxBatch (graphable
//     ones: n <= MaxGraphTokens), logits rows, no argmax (the engine's plain
//     and device-sampled decode steps);
//   - tree steps of T = 2..MaxTree tokens of one request (an ancestor mask,
//     so T > 8 runs exact: exact.go), with device argmax (greedy
//     verification, engine ArgmaxOnly) and with logits (sampled verification);
//   - for each draft-heads set loaded on the backend (LoadHeads: Medusa):
//     T = 1..MaxTree tokens with the heads on every row, argmax and logits;
//   - a request's last prefill chunk of T = 2..AttnTileMin-1 tokens with
//     one logits row (WarmupPlan.NoPrefill turns it off; up to
//     MaxGraphTokens with Options.NoAttnTile). With the prefix
//     cache a prompt's new tokens are mostly its tail past the last
//     cached block (1..15 of 16), so these are the prefill steps a server
//     takes again and again. Uncaptured, each ran eagerly (0.7 ms on the
//     H100 for 10-12 tokens, against ~0.2 ms for a graphed tree step of
//     that size) or, at its second sighting, was captured (1.8 ms) in the
//     middle of a request: bench workload --backend cuda, code-edit trace,
//     0.7-1.8 ms of a 4-6 ms drafted request. Longer chunks run attn_tile
//     (not graphable) and stay eager.
//
// Not covered: multi-step greedy decoding (DecodeGreedy's own keys), steps
// mixing several requests' trees (their T is the sum), and any shape whose
// capture fails (it stays eager, as before).
//
// KV state: the steps write K/V into slots [0, reserve) and read slots
// [reserve, reserve+context) as their cached prefix. Warmup copies the K/V of
// the written slots aside first and back at the end (also after an error),
// all inside one task on the device worker, so no request's step runs in
// between and no slot a request holds changes. The scratch buffers are
// sized up front (WarmupPlan.ScratchTokens) so that a larger step later
// (a prefill burst) does not re-allocate them, which drops every graph.

// WarmupPlan selects the shapes Warmup captures. Zero values pick defaults.
type WarmupPlan struct {
	// MaxBatch: plain decode batches of 1..MaxBatch requests (0: 32; only
	// batches of at most MaxGraphTokens are graphable).
	MaxBatch int
	// MaxTree: tree steps of 2..MaxTree tokens (0 or more than
	// MaxGraphTokens: MaxGraphTokens). Negative: no tree steps.
	MaxTree int
	// MaxContext: the longest context (cached plus new tokens) a request
	// reaches; picks the attention split counts captured (0: NumSlots).
	// It is cut to the slots the backend has beyond the written ones.
	MaxContext int
	// ScratchTokens: the step scratch is sized for steps of this many
	// tokens (and 2*MaxBatch+2*MaxGraphTokens logits rows) before
	// capturing, so that steps up to it keep the graphs (a larger step
	// re-allocates the scratch and drops them, as before); 0: NumSlots up
	// to 4096; never below MaxGraphTokens.
	ScratchTokens int
	// HeadsRows: the draft-heads scratch is sized for this many head rows
	// (0: 256) when heads are loaded.
	HeadsRows int
	// Budget bounds the warm-up's wall time (0: 60 s); shapes left when it
	// runs out stay cold (captured at their second sighting as before).
	Budget time.Duration
	// Log, when set, receives progress lines (key/value pairs as slog).
	Log func(msg string, args ...any)
	// NoPrefill: no last-prefill-chunk shapes.
	NoPrefill bool
}

// WarmupStats reports a warm-up.
type WarmupStats struct {
	Shapes    int           // step shapes run
	Captured  int           // graphs captured by the warm-up
	Existing  int           // shapes that already had a graph
	Eager     int           // shapes that stayed eager (not graphable, or capture failed)
	Left      int           // shapes not run (budget or context ran out)
	Splits    []int         // attention split counts covered
	Graphs    int           // graphs the backend holds after the warm-up
	Elapsed   time.Duration // wall time
	Scratch   int64         // device bytes of step scratch after sizing
	DeviceMiB int64         // device memory in use growth during the warm-up (MiB; 0 when unknown)
}

// warmShape is one step shape of the warm-up.
type warmShape struct {
	n    int  // requests (plain batch) or tokens (tree, prefill)
	tree bool // one request of n tokens with a chain ancestor mask
	// prefill: one request of n tokens without a mask, one logits row
	// (its last token): a prompt's last prefill chunk
	prefill bool
	argmax  bool // device argmax rows (r.Argmax)
	heads   int  // draft heads set id (tree with heads), 0: none
	ctx     int  // target longest key count (picks the splits)
}

// Warmup captures the CUDA graphs of the step shapes a server uses (see
// WarmupPlan) and returns what it did. Call it once after loading, before
// serving: it runs on the device worker as one task. A backend with
// Options.NoGraphs does nothing. The captured graphs are the ones later
// steps replay (the same keys), so outputs are those of a cold backend.
func (b *Backend) Warmup(ctx context.Context, p WarmupPlan) (WarmupStats, error) {
	var st WarmupStats
	if b.closed {
		return st, kernels.ErrClosed
	}
	if b.opt.NoGraphs {
		return st, nil
	}
	t0 := time.Now()
	if p.MaxBatch <= 0 {
		p.MaxBatch = 32
	}
	if p.MaxTree == 0 || p.MaxTree > MaxGraphTokens {
		p.MaxTree = MaxGraphTokens
	}
	if p.ScratchTokens <= 0 {
		p.ScratchTokens = min(b.opt.NumSlots, 4096)
	}
	p.ScratchTokens = max(p.ScratchTokens, MaxGraphTokens)
	if p.HeadsRows <= 0 {
		p.HeadsRows = 256
	}
	if p.Budget <= 0 {
		p.Budget = 60 * time.Second
	}
	nHeads := 0
	if err := b.dev.Do(func(*kernels.Ctx) error { nHeads = len(b.hd.sets); return nil }); err != nil {
		return st, err
	}
	// written slots: a batch's requests, a tree's tokens, the heads sizing step
	reserve := max(min(p.MaxBatch, MaxGraphTokens), p.MaxTree, 1)
	if nHeads > 0 {
		reserve = max(reserve, p.HeadsRows)
	}
	p.ScratchTokens = max(p.ScratchTokens, reserve) // the heads sizing step's tokens
	if reserve >= b.opt.NumSlots {
		return st, fmt.Errorf("warmup: %d slots, need more than %d: %w", b.opt.NumSlots, reserve, ErrRequest)
	}
	if p.MaxContext <= 0 || p.MaxContext > b.opt.NumSlots-reserve {
		p.MaxContext = b.opt.NumSlots - reserve
	}
	// the shortest key count of each split count up to MaxContext
	var ctxOf []int
	last := -1
	for L := 1; L <= p.MaxContext; L++ {
		if s := b.dev.AttnSplitsFor(L); s != last {
			st.Splits = append(st.Splits, s)
			ctxOf = append(ctxOf, L)
			last = s
		}
	}
	var shapes []warmShape
	for _, L := range ctxOf {
		for n := 1; n <= min(p.MaxBatch, MaxGraphTokens); n++ {
			shapes = append(shapes, warmShape{n: n, ctx: L})
		}
		for T := 2; T <= p.MaxTree; T++ {
			shapes = append(shapes, warmShape{n: T, tree: true, argmax: true, ctx: L},
				warmShape{n: T, tree: true, ctx: L})
		}
		if !p.NoPrefill {
			// chunks of AttnTileMin tokens and more run attn_tile (not
			// graphable) unless the backend has it off (NoAttnTile)
			most := AttnTileMin - 1
			if b.tileTokens == 0 {
				most = MaxGraphTokens
			}
			for T := 2; T <= most && T <= MaxGraphTokens; T++ {
				shapes = append(shapes, warmShape{n: T, prefill: true, ctx: L})
			}
		}
		for id := 1; id <= nHeads; id++ {
			shapes = append(shapes, warmShape{n: 1, tree: true, heads: id, ctx: L})
			for T := 2; T <= p.MaxTree; T++ {
				shapes = append(shapes, warmShape{n: T, tree: true, argmax: true, heads: id, ctx: L},
					warmShape{n: T, tree: true, heads: id, ctx: L})
			}
		}
	}
	logf := func(msg string, args ...any) {
		if p.Log != nil {
			p.Log(msg, args...)
		}
	}
	logf("cuda graph warm-up", "shapes", len(shapes), "splits", st.Splits, "max_batch", p.MaxBatch,
		"max_tree", p.MaxTree, "heads_sets", nHeads, "scratch_tokens", p.ScratchTokens)
	err := b.dev.Do(func(c *kernels.Ctx) (err error) {
		free0, _ := c.MemInfo()
		save, err := b.saveSlots(c, reserve)
		if err != nil {
			return err
		}
		defer func() {
			if rerr := b.restoreSlots(c, save, reserve); rerr != nil && err == nil {
				err = rerr
			}
			st.Graphs = len(b.graphs)
			if free1, _ := c.MemInfo(); free0 > free1 {
				st.DeviceMiB = (free0 - free1) >> 20
			}
		}()
		// size the scratch first: growing it later destroys the graphs
		// tokens: a prefill burst; logits rows: decode rows and trees
		// (one per token) of a step, far fewer than its tokens
		T, R := p.ScratchTokens, min(p.ScratchTokens, max(2*p.MaxBatch+2*MaxGraphTokens, reserve))
		if err = b.ensure(c, T, max(2*b.opt.NumSlots, 4096), max(p.MaxBatch*(MaxGraphTokens+1)*3, 256), R); err != nil {
			return fmt.Errorf("warmup: scratch for %d tokens: %w", T, err)
		}
		st.Scratch = b.scratchBytes()
		for id := 1; id <= nHeads; id++ {
			// grows the heads scratch (heads.go headsBegin), which also
			// drops the graphs: before any capture. The fused kernels'
			// buffers (nh x rows <= HeadsFusedMaxRows) and the unfused
			// ones differ: size both at their largest row count.
			sizes := []int{p.HeadsRows}
			if fr := min(HeadsFusedMaxRows/b.hd.sets[id-1].nh, p.HeadsRows); fr > 0 && fr < p.HeadsRows {
				sizes = append(sizes, fr)
			}
			for _, rows := range sizes {
				if err = b.warmHeadsSizing(c, id, rows); err != nil {
					return err
				}
			}
		}
		next := 0
		for i, sh := range shapes {
			if ctx.Err() != nil || time.Since(t0) > p.Budget {
				st.Left = len(shapes) - i
				logf("cuda graph warm-up stopped", "context", fmt.Sprint(ctx.Err()), "budget", p.Budget.String(), "left", st.Left)
				break
			}
			var res int
			if res, err = b.warmShape(c, sh, reserve); err != nil {
				return fmt.Errorf("warmup: shape %+v: %w", sh, err)
			}
			st.Shapes++
			switch res {
			case warmCaptured:
				st.Captured++
			case warmExisting:
				st.Existing++
			default:
				st.Eager++
			}
			if i+1 >= next {
				logf("cuda graph warm-up progress", "done", i+1, "of", len(shapes), "captured", st.Captured,
					"ms", time.Since(t0).Milliseconds())
				next += max(len(shapes)/4, 1)
			}
		}
		return nil
	})
	st.Elapsed = time.Since(t0)
	logf("cuda graph warm-up done", "captured", st.Captured, "existing", st.Existing, "eager", st.Eager, "left", st.Left,
		"graphs", st.Graphs, "ms", st.Elapsed.Milliseconds(), "scratch_mib", st.Scratch>>20, "device_mib", st.DeviceMiB)
	return st, err
}

const (
	warmEager = iota
	warmCaptured
	warmExisting
)

// warmRequests builds the requests of one shape: written slots from 0,
// request 0's cached prefix from slot reserve on (so that its longest key
// count is sh.ctx, or the tree's size when larger).
func (b *Backend) warmRequests(sh warmShape, reserve int) []*engine.ForwardRequest {
	n := sh.n
	nTok := n
	if !sh.tree && !sh.prefill {
		nTok = 1
	}
	cached := make([]int32, max(sh.ctx-nTok, 0))
	for i := range cached {
		cached[i] = int32(reserve + i)
	}
	V := int32(b.cfg.VocabSize)
	tok := func(i int) int32 { return int32(1+7*i) % V }
	if sh.prefill {
		r := &engine.ForwardRequest{Tokens: make([]int32, n), Positions: make([]int32, n), Slots: make([]int32, n),
			CachedSlots: cached, LogitsRows: []int32{int32(n - 1)}}
		for i := range n {
			r.Tokens[i], r.Slots[i], r.Positions[i] = tok(i), int32(i), int32(len(cached)+i)
		}
		return []*engine.ForwardRequest{r}
	}
	if !sh.tree {
		reqs := make([]*engine.ForwardRequest, n)
		for j := range reqs {
			r := &engine.ForwardRequest{Tokens: []int32{tok(j)}, Positions: []int32{0}, Slots: []int32{int32(j)}}
			if j == 0 {
				r.CachedSlots, r.Positions[0] = cached, int32(len(cached))
			}
			reqs[j] = r
		}
		return reqs
	}
	r := &engine.ForwardRequest{Tokens: make([]int32, n), Positions: make([]int32, n), Slots: make([]int32, n),
		Parents: make([]int32, n), CachedSlots: cached, Heads: sh.heads}
	for i := range n {
		r.Tokens[i], r.Slots[i], r.Parents[i] = tok(i), int32(i), int32(i-1)
		r.Positions[i] = int32(len(cached) + i)
	}
	if sh.argmax {
		r.Argmax = make([]int32, n)
	}
	return []*engine.ForwardRequest{r}
}

// warmShape runs one shape until it has a graph (at most twice: the first
// sighting runs eagerly, the second captures) and says what happened.
func (b *Backend) warmShape(c *kernels.Ctx, sh warmShape, reserve int) (int, error) {
	reqs := b.warmRequests(sh, reserve)
	for try := 0; try < 2; try++ {
		g0, h0 := b.graphsMade, b.lastGraphHit
		if err := b.forwardOn(c, reqs, nil); err != nil {
			return warmEager, err
		}
		switch {
		case b.lastGraphHit > h0:
			if try == 0 {
				return warmExisting, nil
			}
			return warmCaptured, nil // not reached: a capture does not replay
		case b.graphsMade > g0:
			return warmCaptured, nil
		}
	}
	return warmEager, nil
}

// warmHeadsSizing runs one eager step with rows head rows of set id
// (requests of up to MaxGraphTokens tokens), which sizes the heads scratch.
func (b *Backend) warmHeadsSizing(c *kernels.Ctx, id, rows int) error {
	var reqs []*engine.ForwardRequest
	for s0 := 0; s0 < rows; s0 += MaxGraphTokens {
		n := min(MaxGraphTokens, rows-s0)
		r := &engine.ForwardRequest{Tokens: make([]int32, n), Positions: make([]int32, n), Slots: make([]int32, n),
			Parents: make([]int32, n), Heads: id}
		for i := range n {
			r.Tokens[i], r.Positions[i], r.Slots[i], r.Parents[i] = int32(1+i), int32(i), int32(s0+i), int32(i-1)
		}
		reqs = append(reqs, r)
	}
	if err := b.forwardOn(c, reqs, nil); err != nil {
		return fmt.Errorf("warmup: heads set %d, %d rows: %w", id, rows, err)
	}
	return nil
}

// saveSlots copies the K and V of slots [0, n) of every layer to a new
// device buffer (freed by restoreSlots).
func (b *Backend) saveSlots(c *kernels.Ctx, n int) (kernels.DevicePtr, error) {
	L, kv := b.cfg.NumLayers, b.kvDim
	buf, err := c.Alloc(2*n*L*kv*4 + n*4)
	if err != nil {
		return 0, fmt.Errorf("warmup: KV save buffer: %w", err)
	}
	idx := buf + kernels.DevicePtr(2*n*L*kv*4)
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(i)
	}
	if err := kernels.Upload(c, idx, ids); err != nil {
		c.Free(buf)
		return 0, err
	}
	stride := int64(b.opt.NumSlots * kv)
	for i, cache := range []kernels.DevicePtr{b.kc, b.vc} {
		if err := c.KVGather(cache, buf+kernels.DevicePtr(i*n*L*kv*4), idx, n, L, kv, stride); err != nil {
			c.Free(buf)
			return 0, err
		}
	}
	return buf, c.Sync()
}

// restoreSlots writes saveSlots' copy back and frees it.
func (b *Backend) restoreSlots(c *kernels.Ctx, buf kernels.DevicePtr, n int) error {
	defer c.Free(buf)
	L, kv := b.cfg.NumLayers, b.kvDim
	idx := buf + kernels.DevicePtr(2*n*L*kv*4)
	stride := int64(b.opt.NumSlots * kv)
	for i, cache := range []kernels.DevicePtr{b.kc, b.vc} {
		if err := c.KVScatter(cache, buf+kernels.DevicePtr(i*n*L*kv*4), idx, n, L, kv, stride); err != nil {
			return err
		}
	}
	return c.Sync()
}

// scratchBytes is the device bytes of the step scratch (ensure).
func (b *Backend) scratchBytes() int64 {
	cfg := b.cfg
	T, R := int64(b.capT), int64(b.capR)
	per := int64(cfg.HiddenSize*4 + b.qkvDim*4 + cfg.QDim()*4 + cfg.IntermediateSize*4 +
		max(2*cfg.IntermediateSize, b.qkvDim)*4 + max(cfg.HiddenSize, cfg.IntermediateSize, cfg.QDim())*2)
	lay := layoutFor(b.capT, b.capS, b.capW, b.capR)
	return T*per + R*int64(cfg.VocabSize)*4 + R*4 + int64(lay.total)*4
}
