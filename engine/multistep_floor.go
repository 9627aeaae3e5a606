package engine

import "time"

// The plain alternative of a lone greedy request.
//
// A lone greedy request on a backend with a GreedyStepper decodes, without
// drafts, Options.DecodeSteps tokens per host round trip (greedySteps; on
// the GPU 8 tokens per chunk at ~0.09 ms a token against ~0.11-0.13 ms for
// a one-token step). The per-step draft budget compared a speculative step
// with a one-token plain step, so for such a request it granted drafts that
// beat a one-token step but not the chunk: bench workload --backend cuda
// (H100, lead's baseline) ran paraphrase at 0.83x and multi-turn at 0.91x
// of plain with near-miss and suffix drafts accepted ~2 tokens a step. The
// budget now requires a lone greedy request's step with drafts to beat the
// measured multi-step rate.

// observeMultiStep records a multi-step chunk of n tokens that took d.
func (e *Engine) observeMultiStep(n int, d time.Duration) {
	if n >= 2 && d > 0 {
		e.multiStep.add(d.Seconds() / float64(n))
	}
}

// plainFloor is the tokens per second request r decodes at without drafts
// when that is the multi-step rate (r alone, greedy, on a GreedyStepper
// backend with Options.DecodeSteps > 1, a chunk measured); 0 otherwise
// (the alternative is a one-token step, which the budget prices itself).
// lone: r is the step's only request.
func (e *Engine) plainFloor(r *request, lone bool) float64 {
	if !lone || e.opts.DecodeSteps <= 1 || e.multiStep.n == 0 || r.recompute || e.active.Load() != 1 {
		return 0
	}
	sp := r.sampler
	if sp.Temperature > 0 || sp.PresencePenalty != 0 || sp.FrequencyPenalty != 0 || sp.Logprobs > 0 || !r.req.Sampling.SkipLogprobs {
		return 0
	}
	if _, ok := e.m.backend.(GreedyStepper); !ok {
		return 0
	}
	return 1 / e.multiStep.v
}
