package medusa

import (
	"fmt"

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
func (p *Proposer) AttachDevice(target *engine.Model) {
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
