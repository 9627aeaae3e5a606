package cpu

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/specgate/specgate/engine/backend"
	"github.com/specgate/specgate/engine/model"
)

// Draft heads inside the CPU forward (issue #17; backend.HeadsBackend).
//
// A Medusa step at batch 1 verifies the pending token and its draft in one
// forward and then runs the draft heads on the accepted row's final hidden
// state. The second token of the forward is nearly free on this backend
// (every weight is streamed once for both), so what a speculative step adds
// over a plain one is mostly the heads (~40 of ~470 µs for the shipped
// heads' head 0, one thread). Here the heads run inside Forward instead: on
// every logits row of a request that asks for them (ForwardRequest.Heads),
// as soon as the final norm is done, on the worker pool, while the calling
// goroutine runs the LM head. When a second core is free the heads cost
// the step no wall time (the worker does them twice: once per row, the
// accepted row being unknown until the LM head is done); when none is, the
// caller runs them itself after the LM head (parallelFor's rule), so a
// busy machine gets the sequential cost plus the second row. Backends of
// one thread (Options.Threads 1) run them after the LM head.

// RowHeads are draft heads that run on final hidden rows (the input of the
// LM head). Top writes, for each of rows rows of hidden ([rows][H]), Width
// candidate tokens into top ([rows][Width]; -1 where a head was not run).
// Top is called from a worker goroutine, never concurrently with itself for
// one registration, and must not call back into the backend; hidden is
// read-only and valid only during the call.
type RowHeads interface {
	Width() int
	Top(hidden []float32, rows int, top []int32)
}

// headsReg holds the heads registered on a backend (ids 1..len). A
// registration lives as long as the backend; keys (AddRowHeadsKey,
// LoadHeads' DraftHeads.Key and TopK) map heads already registered to
// their id, so that a process building many proposers over the same heads
// on one backend holds one registration, not one per proposer.
type headsReg struct {
	mu   sync.Mutex
	list []RowHeads
	keys map[string]int
	// the worker's record (Forward only, not concurrent): waitEWMA is the
	// moving average of the µs the forward's goroutine spent on the heads
	// after its LM head (waiting for the worker, or running them itself
	// when no worker had started); solo counts forwards that run the heads
	// on the forward's goroutine without a worker (finishHeads).
	waitEWMA float64
	solo     int
}

func (r *headsReg) get(id int) RowHeads {
	r.mu.Lock()
	defer r.mu.Unlock()
	if id < 1 || id > len(r.list) {
		return nil
	}
	return r.list[id-1]
}

// AddRowHeads registers h; its id (>= 1) goes into ForwardRequest.Heads.
// Every call adds a registration that lives as long as the backend: callers
// that may register the same heads again use AddRowHeadsKey.
func (b *CPUBackend) AddRowHeads(h RowHeads) (int, error) {
	return b.AddRowHeadsKey("", h)
}

// AddRowHeadsKey is AddRowHeads for heads identified by key (non-empty: the
// same key must mean heads whose Top writes the same candidates): when key
// is registered already it returns that registration's id and h is not
// kept. One registration may then serve several proposers; Forward calls
// are serialized, so its Top is still never called concurrently.
func (b *CPUBackend) AddRowHeadsKey(key string, h RowHeads) (int, error) {
	if h == nil || h.Width() < 1 {
		return 0, fmt.Errorf("engine: CPU backend: row heads of width %d: %w", widthOf(h), model.ErrBadConfig)
	}
	r := &b.heads
	r.mu.Lock()
	defer r.mu.Unlock()
	if id, ok := r.keys[key]; ok && key != "" {
		return id, nil
	}
	r.list = append(r.list, h)
	id := len(r.list)
	if key != "" {
		if r.keys == nil {
			r.keys = map[string]int{}
		}
		r.keys[key] = id
	}
	return id, nil
}

func widthOf(h RowHeads) int {
	if h == nil {
		return 0
	}
	return h.Width()
}

// HeadsWidth implements backend.HeadsBackend: the row stride of HeadTop for
// heads id (0 when unknown).
func (b *CPUBackend) HeadsWidth(id int) int {
	if h := b.heads.get(id); h != nil {
		return h.Width()
	}
	return 0
}

// LoadHeads implements backend.HeadsBackend for heads given as float32
// weights (the device contract): residual blocks x ← x + SiLU(W x + b) and
// the projection run as float32 matrices on this backend's kernels, the
// projection being the target's LM head when d.Proj is nil. Proposers that
// hold their heads as CPU matrices already (int8, Medusa) register them
// with AddRowHeadsKey instead. The same non-empty Key and TopK load once
// (the contract, as on CUDA).
func (b *CPUBackend) LoadHeads(d *backend.DraftHeads) (int, error) {
	if err := d.Validate(b.cfg.HiddenSize, b.cfg.VocabSize); err != nil {
		return 0, err
	}
	key := ""
	if d.Key != "" {
		key = fmt.Sprintf("draft|%s|k=%d", d.Key, d.TopK)
		b.heads.mu.Lock()
		id, ok := b.heads.keys[key]
		b.heads.mu.Unlock()
		if ok {
			return id, nil
		}
	}
	H := d.Hidden
	g := &draftRowHeads{n: d.NumHeads, k: d.TopK, hidden: H, rows: d.Rows(b.cfg.VocabSize), ids: d.IDs}
	for h := range d.NumHeads {
		var ws []*Mat
		for l := range d.Layers {
			ws = append(ws, NewMat(d.W[h][l], H, H))
		}
		g.w = append(g.w, ws)
		g.b = append(g.b, d.B[h])
		switch {
		case d.Proj == nil:
			g.proj = append(g.proj, &Mat{w: b.lmHead})
		case len(d.Proj) == 1 && h > 0:
			g.proj = append(g.proj, g.proj[0])
		default:
			g.proj = append(g.proj, NewMat(d.Proj[h], g.rows, H))
		}
	}
	return b.AddRowHeadsKey(key, g)
}

var _ backend.HeadsBackend = (*CPUBackend)(nil)

// draftRowHeads are LoadHeads' heads.
type draftRowHeads struct {
	n, k, hidden, rows int
	w                  [][]*Mat
	b                  [][][]float32
	proj               []*Mat
	ids                []int32
	x, t, logits       []float32
	top                []int32
}

func (g *draftRowHeads) Width() int { return g.n * g.k }

func (g *draftRowHeads) Top(hidden []float32, rows int, top []int32) {
	H := g.hidden
	g.x, g.t = grow(g.x, rows*H), grow(g.t, rows*H)
	g.logits = grow(g.logits, rows*g.rows)
	for h := range g.n {
		copy(g.x, hidden[:rows*H])
		for l, w := range g.w[h] {
			w.ResBlock(1, g.x, g.t, g.b[h][l], rows)
		}
		g.proj[h].MulT(1, g.logits, g.x, rows)
		for r := range rows {
			g.top = TopK(g.logits[r*g.rows:(r+1)*g.rows], g.k, g.top[:0])
			dst := top[r*g.Width()+h*g.k : r*g.Width()+(h+1)*g.k]
			for j := range dst {
				dst[j] = -1
				if j < len(g.top) {
					dst[j] = g.top[j]
					if g.ids != nil {
						dst[j] = g.ids[g.top[j]]
					}
				}
			}
		}
	}
}

// TopK appends to dst the indices of the k largest values of l, largest
// first (ties: lower index first; NaN counts as -Inf).
func TopK(l []float32, k int, dst []int32) []int32 {
	k = min(k, len(l))
	dst = dst[:0]
	if k <= 0 {
		return dst
	}
	val := func(i int32) float32 {
		if v := l[i]; v == v {
			return v
		}
		return float32(math.Inf(-1))
	}
	for i := range l {
		v := val(int32(i))
		if len(dst) == k {
			if !(v > val(dst[k-1])) {
				continue
			}
			dst[k-1] = int32(i)
		} else {
			dst = append(dst, int32(i))
		}
		for j := len(dst) - 1; j > 0 && val(dst[j]) > val(dst[j-1]); j-- {
			dst[j], dst[j-1] = dst[j-1], dst[j]
		}
	}
	return dst
}

// headsJob is one Forward's draft-head work: the logits rows of every
// request that asked for heads. Whoever claims it first runs it: a pool
// worker woken a layer early (wakeHeads), or the forward's own goroutine
// after the LM head (finishHeads) when no worker has started it by then,
// so the forward never waits for a worker that has not been scheduled.
type headsJob struct {
	parts   []headsPart
	claim   atomic.Bool   // set by whoever runs the parts
	ready   atomic.Bool   // parts' hidden rows are set (readyHeads)
	readyCh chan struct{} // closed by readyHeads (a worker that spun too long waits on it)
	done    chan struct{} // closed when a worker has run the parts
	queued  sync.WaitGroup
}

type headsPart struct {
	h      RowHeads // nil: unknown id, HeadTop gets -1
	row    int      // first logits row of the request (in the final hidden rows)
	hidden []float32
	rows   int
	top    []int32
}

// headsWakeLayers is how many layers before the last one ends a worker is
// woken for the heads, and headsSpin how long it spins for the hidden rows
// before it blocks. On the 2-core VM a parked worker took ~100 µs to run
// after it was woken (a halted vCPU's wake-up), a layer of the shipped
// target ~65 µs and the LM head of a 2-token step ~120 µs: woken one layer
// early the worker started 35-80 µs after the rows were ready and was often
// still running the heads when the LM head was done; two layers early it
// started within ~5 µs, having spun ~50 µs. Blocking after headsSpin keeps
// a worker that was woken too early (a slow layer on a loaded machine) from
// holding a core.
//
// headsWaitMax (µs) and headsSoloForwards: finishHeads' fallback.
const (
	headsWakeLayers   = 2
	headsSpin         = 150 * time.Microsecond
	headsWaitMax      = 20
	headsSoloForwards = 256
)

// work runs every part's heads.
func (j *headsJob) work() {
	for _, p := range j.parts {
		if p.h == nil {
			for i := range p.top {
				p.top[i] = -1
			}
			continue
		}
		p.h.Top(p.hidden, p.rows, p.top)
	}
}

// runQueued is the pool task: claim the job, wait for the hidden rows
// (spinning at most SpinMax, so that a worker woken early is on its core
// when they are ready, then blocking), run the heads.
func (j *headsJob) runQueued(int, int) {
	if !j.claim.CompareAndSwap(false, true) {
		return // the forward ran it itself
	}
	defer close(j.done)
	ts := time.Now()
	for spins := 0; !j.ready.Load(); spins++ {
		if spins%256 == 255 && time.Since(ts) > headsSpin {
			<-j.readyCh
			break
		}
	}
	j.work()
}

// headsOf collects the heads of reqs (validated before the forward
// starts); nil when no request asks for heads on a logits row.
func (b *CPUBackend) headsOf(reqs []*backend.ForwardRequest) (*headsJob, error) {
	var j *headsJob
	i := 0
	for k, r := range reqs {
		n := len(r.Tokens)
		if r.LogitsRows != nil {
			n = len(r.LogitsRows)
		}
		if r.Heads > 0 && n > 0 {
			p := headsPart{h: b.heads.get(r.Heads), row: i, rows: n, top: r.HeadTop}
			if p.h != nil {
				w := p.h.Width()
				if len(r.HeadTop) < n*w {
					return nil, fmt.Errorf("engine: request %d: HeadTop holds %d values, want %d rows x %d: %w", k, len(r.HeadTop), n, w, model.ErrBadConfig)
				}
				p.top = r.HeadTop[:n*w]
			}
			if j == nil {
				j = &headsJob{}
			}
			j.parts = append(j.parts, p)
		}
		i += n
	}
	return j, nil
}

// wakeHeads queues j on the worker pool (with more than one thread),
// headsWakeLayers layers before its hidden rows exist.
func (b *CPUBackend) wakeHeads(j *headsJob) {
	if j == nil || b.par.threads < 2 {
		return
	}
	if b.heads.solo > 0 {
		b.heads.solo--
		return
	}
	workers.once.Do(startWorkers)
	j.readyCh, j.done = make(chan struct{}), make(chan struct{})
	j.queued.Add(1) // nobody waits on it: a worker's Done after runQueued
	select {
	case workers.tasks <- poolTask{fn: j.runQueued, lo: 0, hi: 1, wg: &j.queued, waits: true}:
	default: // the pool's queue is full: finishHeads runs it
		j.queued.Done()
	}
}

// readyHeads hands j the final hidden rows hn (the logits rows, in request
// order) and releases a worker waiting in runQueued.
func (b *CPUBackend) readyHeads(j *headsJob, hn []float32) {
	if j == nil {
		return
	}
	H := b.cfg.HiddenSize
	for i := range j.parts {
		p := &j.parts[i]
		p.hidden = hn[p.row*H : (p.row+p.rows)*H]
	}
	j.ready.Store(true)
	if j.readyCh != nil {
		close(j.readyCh)
	}
}

// finishHeads completes j: it runs the heads itself unless a worker has
// claimed them, else waits for that worker.
//
// When the worker does not hide the heads (a busy machine: the worker's
// core is taken, or it is descheduled mid-run), the forward's goroutine
// spends about their full time here; once the moving average of that time
// passes headsWaitMax, the next headsSoloForwards forwards run the heads
// on the forward's goroutine without waking a worker (no spinning thread
// competing for the busy cores), and then the worker is tried again.
func (b *CPUBackend) finishHeads(j *headsJob) {
	if j == nil {
		return
	}
	t0 := time.Now()
	if j.claim.CompareAndSwap(false, true) {
		j.work()
	} else {
		<-j.done
	}
	if j.readyCh == nil {
		return // not queued
	}
	r := &b.heads
	r.waitEWMA = 0.875*r.waitEWMA + 0.125*float64(time.Since(t0).Microseconds())
	if r.waitEWMA > headsWaitMax {
		r.waitEWMA, r.solo = 0, headsSoloForwards
	}
}
