package cuda

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/kernels"
	"github.com/specgate/specgate/safetensors"
)

// Draft heads inside the target's forward (engine.HeadsBackend, issue #17
// point 5) and the argmax of a greedy tree's rows (engine.RowArgmaxer).
//
// A step whose batch asks for heads runs, after the LM head and inside the
// same CUDA graph: the final norm of every logits row (rmsnorm_f32), each
// residual layer of all heads in one launch (heads_resblock), the
// vocabulary projection of all heads and rows in one GEMM (cuBLAS; GEMV
// for at most 8 rows), and every head's top-k per row in one launch
// (heads_topk). Only the top-k tokens (and, for greedy trees, each row's
// argmax) are copied back: a few kilobytes instead of the logits and
// hidden rows.

// ErrHeadsOff: device heads are disabled (Options.NoDeviceHeads, or
// SPECGATE_DEVICE_HEADS=0); the
// proposer then runs its heads on the host.
var ErrHeadsOff = errors.New("cuda backend: device draft heads disabled")

// Fused heads (unless Options.NoHeadsFused): steps whose heads have at most HeadsFusedMaxRows head rows
// (heads x logits rows) run them as three PDL-launched kernels (norm with
// the first residual layer, projection tiles with their top-k, merge)
// instead of norm, residual layer, cuBLAS projection and top-k launched one
// after the other (SPECGATE_HEADS_FUSED=0: never). Measured on the H100
// (docs/device-notes.md, gpuspec call 5), 5 heads, vocabulary limit 2048:
// one logits row 36 vs 55 µs, 17 rows 160 vs 72 µs (the tile projection
// reads the weights once per 8 head rows; cuBLAS reuses them better).

// HeadsFusedMaxRows is the most head rows (heads x logits rows) of the fused path.
const HeadsFusedMaxRows = 16

// fusedFor reports whether set s over R logits rows runs the fused kernels.
func (b *Backend) fusedFor(s *headsSet, R int) bool {
	return !b.opt.NoHeadsFused && s.L >= 1 && s.nh*R <= HeadsFusedMaxRows
}

// headsSet is one loaded set of draft heads.
type headsSet struct {
	key        string
	nh, L, K   int
	rows       int                 // projection rows (candidates per head)
	w, b       []kernels.DevicePtr // per layer: fp16 [nh][H][H], fp32 [nh][H]
	proj       []kernels.DevicePtr // per head, fp16 [rows][H] (one entry when shared)
	ids        kernels.DevicePtr   // int32 [rows], or 0
	width      int                 // nh*K
	projShared bool
	projStride int // elements between heads' projections (0: shared)
}

// headsIO is the backend's draft-head state: loaded sets, the set the step
// being queued runs, and scratch sized by bytes.
type headsIO struct {
	sets []*headsSet
	cur  *headsSet // set by headsBegin for one forward; nil: no heads
	cur0 int       // index+1 of cur (graph key)
	// rows: the step's head rows, the logits rows of the requests that
	// ask for heads (flatBatch.hrows): the heads run on those rows only.
	rows int
	// scratch (device) and its capacity in bytes
	hid, a, bb, y16, logits, top, cv, ci kernels.DevicePtr
	caps                                 [8]int
	host                                 kernels.HostBuf // pinned: argmax [R] then top [R*width]
	hostCap                              int
	wantArg, queued                      bool
}

var (
	_ engine.HeadsBackend = (*Backend)(nil)
	_ engine.RowArgmaxer  = (*Backend)(nil)
)

// ArgmaxOnDevice implements engine.RowArgmaxer.
func (b *Backend) ArgmaxOnDevice() bool { return !b.opt.NoDeviceHeads }

// HeadsWidth implements engine.HeadsBackend.
func (b *Backend) HeadsWidth(id int) int {
	if id < 1 || id > len(b.hd.sets) {
		return 0
	}
	return b.hd.sets[id-1].width
}

// LoadHeads implements engine.HeadsBackend: the heads' weights go to the
// device as fp16 (biases fp32); the same Key and TopK load once.
func (b *Backend) LoadHeads(h *engine.DraftHeads) (int, error) {
	if b.opt.NoDeviceHeads {
		return 0, ErrHeadsOff
	}
	if b.closed {
		return 0, kernels.ErrClosed
	}
	H, V := b.cfg.HiddenSize, b.cfg.VocabSize
	if err := h.Validate(H, V); err != nil {
		return 0, err
	}
	for i, s := range b.hd.sets {
		if s.key == h.Key && s.K == h.TopK {
			return i + 1, nil
		}
	}
	s := &headsSet{key: h.Key, nh: h.NumHeads, L: h.Layers, K: h.TopK, rows: h.Rows(V), width: h.NumHeads * h.TopK}
	err := b.dev.Do(func(c *kernels.Ctx) error {
		f16 := func(parts ...[]float32) (kernels.DevicePtr, error) {
			n := 0
			for _, p := range parts {
				n += len(p)
			}
			buf := make([]uint16, 0, n)
			for _, p := range parts {
				for _, x := range p {
					buf = append(buf, safetensors.Float32ToF16(x))
				}
			}
			p, err := b.alloc(c, 2*n)
			if err != nil {
				return 0, err
			}
			return p, kernels.Upload(c, p, buf)
		}
		for l := range h.Layers {
			var ws [][]float32
			var bs []float32
			for hh := range h.NumHeads {
				ws = append(ws, h.W[hh][l])
				bs = append(bs, h.B[hh][l]...)
			}
			w, err := f16(ws...)
			if err != nil {
				return err
			}
			bp, err := b.alloc(c, 4*len(bs))
			if err != nil {
				return err
			}
			if err := kernels.Upload(c, bp, bs); err != nil {
				return err
			}
			s.w, s.b = append(s.w, w), append(s.b, bp)
		}
		switch {
		case h.Proj == nil:
			s.proj, s.projShared = []kernels.DevicePtr{b.lmHead}, true
		default:
			// one allocation, head after head (the fused kernel strides)
			d, err := f16(h.Proj...)
			if err != nil {
				return err
			}
			for i := range h.Proj {
				s.proj = append(s.proj, d+kernels.DevicePtr(i*s.rows*H*2))
			}
			s.projShared = len(h.Proj) == 1
			if !s.projShared {
				s.projStride = s.rows * H
			}
		}
		if h.IDs != nil {
			p, err := b.alloc(c, 4*len(h.IDs))
			if err != nil {
				return err
			}
			if err := kernels.Upload(c, p, h.IDs); err != nil {
				return err
			}
			s.ids = p
		}
		return c.Sync()
	})
	if err != nil {
		return 0, fmt.Errorf("cuda backend: load draft heads %q: %w", h.Key, err)
	}
	b.hd.sets = append(b.hd.sets, s)
	return len(b.hd.sets), nil
}

// headsBegin (inside forward's Do, after uploadMeta) picks the heads set of
// the batch (the first request's that asks for one) and whether any
// request wants its rows' argmax, and sizes the scratch for fb.R rows.
func (b *Backend) headsBegin(c *kernels.Ctx, reqs []*engine.ForwardRequest, fb *flatBatch) error {
	hd := &b.hd
	hd.cur, hd.cur0, hd.wantArg, hd.rows = nil, 0, false, 0
	for _, r := range reqs {
		hd.wantArg = hd.wantArg || r.Argmax != nil
		if r.Heads > 0 && hd.cur == nil && r.Heads <= len(hd.sets) {
			hd.cur, hd.cur0 = hd.sets[r.Heads-1], r.Heads
		}
	}
	if len(fb.hrows) == 0 {
		hd.cur, hd.cur0 = nil, 0
	}
	if (hd.cur == nil && !hd.wantArg) || fb.R == 0 {
		hd.cur, hd.cur0 = nil, 0
		return nil
	}
	H := b.cfg.HiddenSize
	width, Rh := 0, 0
	var need [8]int
	if s := hd.cur; s != nil {
		Rh = len(fb.hrows)
		hd.rows = Rh
		P := s.nh * Rh
		width = s.width
		cand := P * kernels.HeadsTiles(s.rows) * s.K * 4
		need = [8]int{Rh * H * 4, P * H * 4, P * H * 4, P * H * 2, P * s.rows * 4, Rh * width * 4, cand, cand}
		if b.fusedFor(s, Rh) {
			need[3], need[4] = 0, 0 // no fp16 copy, no logits
		} else {
			need[6], need[7] = 0, 0 // no tile candidates
		}
	}
	grow := false
	for i := range need {
		grow = grow || need[i] > hd.caps[i]
	}
	hostNeed := fb.R*4 + Rh*width*4
	if grow {
		// the graphs hold the old pointers: drop them (recaptured on demand)
		for k, g := range b.graphs {
			c.DestroyGraph(g)
			delete(b.graphs, k)
		}
		ptrs := []*kernels.DevicePtr{&hd.hid, &hd.a, &hd.bb, &hd.y16, &hd.logits, &hd.top, &hd.cv, &hd.ci}
		for i, p := range ptrs {
			if need[i] <= hd.caps[i] {
				continue
			}
			c.Free(*p)
			*p, hd.caps[i] = 0, 0
			n := max(need[i]*3/2, 256)
			q, err := c.Alloc(n)
			if err != nil {
				return fmt.Errorf("draft heads scratch: %w", err)
			}
			*p, hd.caps[i] = q, n
		}
	}
	if hostNeed > hd.hostCap {
		c.FreeHost(hd.host)
		hd.host, hd.hostCap = kernels.HostBuf{}, 0
		n := hostNeed * 3 / 2
		h, err := c.AllocHost(n)
		if err != nil {
			return fmt.Errorf("draft heads: pinned buffer: %w", err)
		}
		hd.host, hd.hostCap = h, n
	}
	return nil
}

// headsKey is the graph-key part of the step's heads: its set and its
// number of head rows.
func (b *Backend) headsKey() int {
	if b.hd.cur0 == 0 {
		return 0
	}
	return b.hd.cur0 | b.hd.rows<<16
}

// runHeads queues the heads of the step's set over its head rows (inside
// run, so inside the step's graph): lay.hrows maps them to tokens. The
// step's logits-row count is not used: the heads run only on the rows of
// the requests that asked for them.
func (b *Backend) runHeads(c *kernels.Ctx, _ int, lay metaLayout) error {
	hd := &b.hd
	s, R := hd.cur, hd.rows
	if s == nil || R == 0 {
		return nil
	}
	H := b.cfg.HiddenSize
	rows := b.meta + kernels.DevicePtr(lay.hrows*4)
	if b.fusedFor(s, R) {
		// three PDL launches: norm + first residual layer, further layers,
		// projection with per-tile top-k, merge
		if err := c.HeadsNormResBlock(b.x, rows, b.norm, b.eps, s.w[0], s.b[0], hd.a, s.nh, R, H); err != nil {
			return err
		}
		x, out := hd.a, hd.bb
		for l := 1; l < s.L; l++ {
			if err := c.HeadsResBlock(x, R*H, s.w[l], s.b[l], out, s.nh, R, H); err != nil {
				return err
			}
			x, out = out, x
		}
		return c.HeadsProjTopK(x, s.proj[0], s.projStride, hd.cv, hd.ci, s.ids, hd.top, s.nh, R, s.rows, H, s.K)
	}
	if err := c.RMSNormF32(b.x, rows, b.norm, b.eps, hd.hid, R, H); err != nil {
		return err
	}
	x, stride, out, spare := hd.hid, 0, hd.a, hd.bb
	for l := range s.L {
		if err := c.HeadsResBlock(x, stride, s.w[l], s.b[l], out, s.nh, R, H); err != nil {
			return err
		}
		x, stride = out, R*H
		out, spare = spare, out
	}
	if stride == 0 { // no residual layers: every head projects the hidden rows
		for h := range s.nh {
			if err := c.DtoD(out+kernels.DevicePtr(h*R*H*4), hd.hid, R*H*4); err != nil {
				return err
			}
		}
		x = out
	}
	P := s.nh * R
	if s.projShared {
		if err := b.headsMM(c, s.proj[0], x, hd.logits, P, s.rows, H); err != nil {
			return err
		}
	} else {
		for h := range s.nh {
			if err := b.headsMM(c, s.proj[h], x+kernels.DevicePtr(h*R*H*4), hd.logits+kernels.DevicePtr(h*R*s.rows*4), R, s.rows, H); err != nil {
				return err
			}
		}
	}
	return c.HeadsTopK(hd.logits, s.ids, hd.top, s.nh, R, s.rows, s.K)
}

// headsMM: Y [M][N] = X [M][K] (fp32) · W^T (W fp16 [N][K]): GEMV for M <=
// GemvMaxM, else cuBLAS on an fp16 copy of X, else GEMV in chunks.
func (b *Backend) headsMM(c *kernels.Ctx, W, X, Y kernels.DevicePtr, M, N, K int) error {
	if M <= kernels.GemvMaxM && c.GemvFits(M, K) {
		return c.Gemv(kernels.GemvPlain, W, X, 0, 0, 0, Y, M, N, K)
	}
	if kernels.HasCUBLAS() && !b.opt.NoCUBLAS {
		if err := c.CastF16(X, b.hd.y16, M*K); err != nil {
			return err
		}
		return c.GemmF16(W, b.hd.y16, Y, M, N, K, 1, 0)
	}
	step := kernels.GemvMaxM
	for step > 0 && !c.GemvFits(step, K) {
		step--
	}
	if step == 0 {
		return fmt.Errorf("draft heads: K=%d does not fit shared memory and cuBLAS is absent: %w", K, kernels.ErrBadArg)
	}
	for m0 := 0; m0 < M; m0 += step {
		m := min(step, M-m0)
		if err := c.Gemv(kernels.GemvPlain, W, X+kernels.DevicePtr(m0*K*4), 0, 0, 0, Y+kernels.DevicePtr(m0*N*4), m, N, K); err != nil {
			return err
		}
	}
	return nil
}

// headsQueueOut queues the copies of the step's argmax rows and head top-k
// to the pinned buffer (before the step's Sync).
func (b *Backend) headsQueueOut(c *kernels.Ctx, fb *flatBatch) error {
	hd := &b.hd
	if (hd.cur == nil && !hd.wantArg) || fb.R == 0 {
		return nil
	}
	host := unsafe.Pointer(&hd.host.Bytes()[0])
	if hd.wantArg {
		if err := c.DtoHRaw(host, b.argIdx, fb.R*4); err != nil {
			return err
		}
	}
	if s := hd.cur; s != nil {
		if err := c.DtoHRaw(unsafe.Add(host, fb.R*4), hd.top, hd.rows*s.width*4); err != nil {
			return err
		}
	}
	hd.queued = true
	return nil
}

// headsFinish copies argmax and head candidates into the requests (after
// the step's Sync) and forgets the step's set. Requests whose heads were not
// run get -1s.
func (b *Backend) headsFinish(reqs []*engine.ForwardRequest, fb *flatBatch) {
	hd := &b.hd
	defer func() { hd.cur, hd.cur0, hd.wantArg, hd.queued, hd.rows = nil, 0, false, false, 0 }()
	if fb.R == 0 {
		return
	}
	var arg, top []int32
	if hd.queued {
		all := unsafe.Slice((*int32)(unsafe.Pointer(&hd.host.Bytes()[0])), hd.hostCap/4)
		arg = all[:fb.R]
		if hd.cur != nil {
			top = all[fb.R : fb.R+hd.rows*hd.cur.width]
		}
	}
	h0 := 0 // the request's first head row (flatBatch.hrows order)
	for i, r := range reqs {
		r0, r1 := fb.reqRows[i], fb.R
		if i+1 < len(reqs) {
			r1 = fb.reqRows[i+1]
		}
		if r.Argmax != nil && arg != nil {
			copy(r.Argmax, arg[r0:r1])
		}
		if r.Heads > 0 {
			h0 += r1 - r0
		}
		if r.Heads > 0 && r.HeadTop != nil {
			if top != nil && r.Heads == hd.cur0 {
				w := hd.cur.width
				copy(r.HeadTop, top[(h0-(r1-r0))*w:h0*w])
			} else {
				for j := range r.HeadTop {
					r.HeadTop[j] = -1
				}
			}
		}
	}
}

// freeHeads releases the heads' scratch (Close; the weights are in allocs).
func (b *Backend) freeHeads(c *kernels.Ctx) {
	hd := &b.hd
	for _, p := range []kernels.DevicePtr{hd.hid, hd.a, hd.bb, hd.y16, hd.logits, hd.top, hd.cv, hd.ci} {
		c.Free(p)
	}
	c.FreeHost(hd.host)
	*hd = headsIO{}
}
