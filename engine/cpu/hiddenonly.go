package cpu

import "github.com/specgate/specgate/engine/backend"

// ForwardRequest.HiddenOnly on the CPU (backend.HiddenOnlyForwarder).

// ForwardsHiddenOnly implements HiddenOnlyForwarder.
func (b *CPUBackend) ForwardsHiddenOnly() bool { return true }

// lmHeadRows returns the input rows of the LM head: hn (R rows of the
// final-normed hidden state, in request order) without the rows of
// HiddenOnly requests, and their number.
func (b *CPUBackend) lmHeadRows(reqs []*backend.ForwardRequest, hn []float32, R int) ([]float32, int) {
	H := b.cfg.HiddenSize
	skip := 0
	for _, r := range reqs {
		if r.HiddenOnly {
			skip++
		}
	}
	if skip == 0 {
		return hn, R
	}
	s := &b.scratch
	s.lmIn = grow(s.lmIn, R*H)[:0]
	i := 0
	for _, r := range reqs {
		n := len(r.Tokens)
		if r.LogitsRows != nil {
			n = len(r.LogitsRows)
		}
		if !r.HiddenOnly {
			s.lmIn = append(s.lmIn, hn[i*H:(i+n)*H]...)
		}
		i += n
	}
	return s.lmIn, len(s.lmIn) / H
}
