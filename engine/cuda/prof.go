package cuda

import (
	"github.com/specgate/specgate/kernels"
)

// Stage profile (benchmarks): with SetStageProfile(true) every forward runs
// eagerly (no CUDA graph) behind a device spin of a few milliseconds, so
// the host queues the whole step before the device starts it, and an event
// is recorded after each stage (embedding, per layer qkv, attention, o_proj,
// gate_up, down; lm_head, argmax, heads). StageProfile returns the device
// time of each stage summed over layers and forwards. With PDL on, a
// kernel cannot start during its predecessor's tail across an event, so
// stage sums are an upper bound on the graph-replayed step (run with
// Options.NoPDL for a like-for-like comparison).

// stageProf holds the events of the forward being queued.
type stageProf struct {
	pool    []kernels.Event
	names   []string
	order   []string
	total   map[string]float64 // seconds
	forward int
}

// SetStageProfile turns the stage profile on or off (see above).
func (b *Backend) SetStageProfile(on bool) {
	_ = b.dev.Do(func(c *kernels.Ctx) error {
		if !on {
			if b.prof != nil {
				for _, e := range b.prof.pool {
					c.DestroyEvent(e)
				}
			}
			b.prof = nil
			return nil
		}
		if b.prof == nil {
			b.prof = &stageProf{total: map[string]float64{}}
		}
		return nil
	})
}

// StageProfile returns the stages in queue order, the device seconds of
// each summed over the forwards since the last call, and that number of
// forwards; it resets the sums.
func (b *Backend) StageProfile() (names []string, seconds []float64, forwards int) {
	_ = b.dev.Do(func(c *kernels.Ctx) error {
		p := b.prof
		if p == nil {
			return nil
		}
		if err := c.Sync(); err != nil {
			return err
		}
		b.resolveProf(c)
		names = p.order
		for _, n := range p.order {
			seconds = append(seconds, p.total[n])
		}
		forwards = p.forward
		p.order, p.total, p.forward = nil, map[string]float64{}, 0
		return nil
	})
	return names, seconds, forwards
}

// resolveProf adds the elapsed time between the last forward's events to
// the sums (its events have completed: forward synchronises).
func (b *Backend) resolveProf(c *kernels.Ctx) {
	p := b.prof
	if len(p.names) < 2 {
		p.names = p.names[:0]
		return
	}
	for i := 1; i < len(p.names); i++ {
		ms, err := c.ElapsedMs(p.pool[i-1], p.pool[i])
		if err != nil {
			continue
		}
		n := p.names[i]
		if _, ok := p.total[n]; !ok {
			p.order = append(p.order, n)
		}
		p.total[n] += float64(ms) / 1e3
	}
	p.forward++
	p.names = p.names[:0]
}

// profStart (stage profile on) resolves the previous forward, queues the
// spin and the first event.
func (b *Backend) profStart(c *kernels.Ctx) error {
	if b.prof == nil {
		return nil
	}
	b.resolveProf(c)
	if err := c.Spin(3_000_000); err != nil {
		return err
	}
	return b.mark(c, "start")
}

// mark (stage profile on) records an event ending stage name.
func (b *Backend) mark(c *kernels.Ctx, name string) error {
	p := b.prof
	if p == nil {
		return nil
	}
	i := len(p.names)
	if i == len(p.pool) {
		e, err := c.NewEvent()
		if err != nil {
			return err
		}
		p.pool = append(p.pool, e)
	}
	p.names = append(p.names, name)
	return c.Record(p.pool[i])
}
