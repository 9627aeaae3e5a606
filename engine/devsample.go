package engine

// Sampling on the device (owned by the GPU work, issue #12). A backend that
// implements DeviceSampler honours ForwardRequest.Sample: instead of copying
// a logits row back for the engine's CPU sampler, it draws the token on the
// device with the same transforms as Probs (penalties, temperature, top-k,
// top-p, min-p) and the same uniform the CPU sampler would have drawn from
// the request's RNG, and returns only the token and its logprob. The engine
// uses it for plain (non-speculative) rows whose request wants no top
// logprobs; everything else keeps the CPU path.

// rowSample returns the device-sampling request for r's next token, or nil
// when the backend cannot sample on the device or r needs the logits row on
// the host (top logprobs). The engine asks for it only for rows without a
// draft tree (a speculative request's step without a draft samples here too). It draws r's uniform as the CPU path
// does (one Float64 per sampled token, none for greedy), so a seed gives the
// same stream of uniforms either way (the item is built once per step and
// reused by the engine's retries).
func (e *Engine) rowSample(r *request) *RowSample {
	ds, ok := e.m.backend.(DeviceSampler)
	if !ok || !ds.SamplesOnDevice() || r.sampler.Logprobs > 0 {
		return nil
	}
	p := r.sampler
	rs := &RowSample{Temperature: p.Temperature, TopK: p.TopK, TopP: p.TopP, MinP: p.MinP}
	if (p.PresencePenalty != 0 || p.FrequencyPenalty != 0) && len(r.generated) > 0 {
		counts := map[int32]int{}
		for _, t := range r.generated {
			if t >= 0 && int(t) < e.m.Config.VocabSize {
				counts[t]++
			}
		}
		for t, c := range counts {
			rs.PenaltyTokens = append(rs.PenaltyTokens, t)
			rs.Penalty = append(rs.Penalty, float32(float64(c)*float64(p.FrequencyPenalty)+float64(p.PresencePenalty)))
		}
	}
	if p.Temperature > 0 {
		rs.U = r.rng.Float64() // where the CPU path's Sample would draw it
	}
	return rs
}

// sampledOnDevice hands r the token the backend sampled for it (it.Sample)
// and reports true; false when the item was not sampled on the device.
func (e *Engine) sampledOnDevice(r *request, it BatchItem) bool {
	rs := it.Sample
	if rs == nil {
		return false
	}
	r.generated = append(r.generated, rs.Token)
	e.generated.Add(1)
	e.handOut(r, stepOut{toks: []int32{rs.Token}, logprobs: []float32{rs.Logprob}})
	return true
}
