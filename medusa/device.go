package medusa

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/specgate/specgate/engine"
)

// Heads on the device (issue #17 point 5): on a backend that implements
// engine.HeadsBackend (the CUDA one) the heads run inside the target's
// forward, on the final hidden state of every logits row, and the engine
// hands Propose each head's top-k for the row that predicted the pending
// token (ProposeRequest.HeadTop) instead of the hidden row. The tree is
// laid over those candidates exactly as over the host heads' top-k.

// deviceHeads is a proposer's registration on one backend.
type deviceHeads struct {
	backend engine.Backend
	id, k   int
	err     error // why the heads run on the host (nil: not tried or on the device)
}

// AttachDevice registers the heads on target's backend when it can run
// them (engine.HeadsBackend); otherwise, or when the backend refuses them
// (DeviceError says why), the heads keep running on the host from the
// hidden rows. New calls it.
//
// Hydra heads never run on a backend: head 0 needs the pending token, which
// is sampled after the forward, and head d the tokens the tree chose at
// depth d (DeviceError is ErrHydraOnHost).
func (p *Proposer) AttachDevice(target *engine.Model) {
	if p.heads.IsHydra() {
		p.dev = deviceHeads{err: ErrHydraOnHost}
		return
	}
	if cb, ok := target.Backend().(*engine.CPUBackend); ok {
		p.attachCPU(cb)
		return
	}
	hb, ok := target.Backend().(engine.HeadsBackend)
	if !ok {
		return
	}
	k := 1
	for _, t := range p.tree.TopK {
		k = max(k, t)
	}
	h := p.heads
	w, proj := h.deviceWeights() // int8 heads: float32 only for the upload, not kept
	d := &engine.DraftHeads{
		Key:      fmt.Sprintf("%s|rows=%d|shared=%v", h.Dir, h.Rows(), h.Shared),
		NumHeads: h.NumHeads, Layers: h.layers, Hidden: h.Hidden, TopK: k,
		W: w, B: h.b, Proj: proj, IDs: h.ids,
	}
	id, err := hb.LoadHeads(d)
	if err != nil {
		p.dev = deviceHeads{err: err}
		return
	}
	p.dev = deviceHeads{backend: target.Backend(), id: id, k: k}
}

// CPU backends run the heads inside the target's forward (attachCPU) only
// for trees of one level (depth 1) of at most maxCPUNodes nodes: the heads
// then run on every row of the step (the accepted row is not known before
// the LM head) on a second thread while the first runs the LM head, and
// that hides them only while their work stays below the LM head's (head 0
// is ~1M int8 multiply-adds a row, the LM head ~3.1M fp16). Measured on the
// 2-core VM: a 2-node chain (two heads on three rows) took longer than the
// LM head it ran beside, and its steps were slower than with the heads on
// the host. Deeper or larger trees keep the heads on the host path: run
// once, on the accepted row, after the step.
const maxCPUNodes = 3

// attachCPU registers the heads with a CPU backend that can run them
// beside its LM head: more than one thread (Options.Threads) and a tree of
// depth 1 with at most maxCPUNodes nodes, unless SPECGATE_DEVICE_HEADS=0
// (as on CUDA: heads on the host, for comparison). Otherwise Propose runs
// them from the hidden rows as before.
func (p *Proposer) attachCPU(cb *engine.CPUBackend) {
	if os.Getenv("SPECGATE_DEVICE_HEADS") == "0" || cb.Options().Threads < 2 || p.tree.Depth() != 1 || len(p.tree.Paths) > maxCPUNodes {
		return
	}
	hc := *p.heads
	hc.threads = 1 // it runs on a pool worker: no fan-out from there
	c := &cpuRowHeads{h: &hc, depth: 1, topk: p.tree.TopK, k: p.tree.TopK[0]}
	// The backend keeps a registration for its lifetime (and with it these
	// heads' weights): proposers over the same heads and candidates reuse
	// one (the CUDA backend's LoadHeads keys its sets the same way), so a
	// process that builds a proposer per engine or per benchmark run holds
	// one per distinct set of heads. The registration's Top writes depth 1,
	// TopK[0] candidates of head 0 over the heads' rows.
	key := fmt.Sprintf("medusa|%s|rows=%d|shared=%v|heads=%d|depth=%d|k=%d", filepath.Clean(hc.Dir), hc.Rows(), hc.Shared, hc.NumHeads, c.depth, c.k)
	id, err := cb.AddRowHeadsKey(key, c)
	if err != nil {
		p.dev = deviceHeads{err: err}
		return
	}
	p.dev = deviceHeads{backend: cb, id: id, k: c.k}
}

// DeviceError reports why AttachDevice left the heads on the host (nil
// when they run on the device or the backend cannot run heads at all).
func (p *Proposer) DeviceError() error { return p.dev.err }

// DeviceHeads implements engine.HeadsProposer.
func (p *Proposer) DeviceHeads(b engine.Backend) int {
	if p.dev.id > 0 && b == p.dev.backend {
		return p.dev.id
	}
	return 0
}

var _ engine.HeadsProposer = (*Proposer)(nil)

// fromDevice lays the tree over the device heads' candidates of r.
func (p *Proposer) fromDevice(r engine.ProposeRequest) (engine.Proposal, error) {
	nh, k := p.heads.NumHeads, p.dev.k
	if p.dev.id == 0 || len(r.HeadTop) != nh*k {
		return engine.Proposal{}, fmt.Errorf("medusa: request %d: %d device head candidates, want %d heads x %d", r.ID, len(r.HeadTop), nh, k)
	}
	d := min(r.MaxDepth, p.tree.depthOf(r.Budget), nh)
	top := make([][]int32, d)
	for h := range d {
		top[h] = r.HeadTop[h*k : h*k+min(k, p.tree.TopK[h])]
	}
	return p.layTree(top, r.Budget, d), nil
}
