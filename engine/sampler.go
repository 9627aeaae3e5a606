package engine

import (
	"math"
	"math/rand/v2"
	"sort"
)

// Probs returns the distribution the sampler draws from for one logits row
// ([VocabSize]), after all transforms, in this order:
//  1. penalties (OpenAI semantics) over history, the tokens generated so far:
//     logit[t] -= count[t]*FrequencyPenalty + (count[t] > 0)*PresencePenalty;
//  2. Temperature <= 0: a one-hot vector at the argmax (lowest id on ties);
//  3. divide by Temperature, softmax;
//  4. top-k: keep the TopK most likely (ties: lower id first);
//  5. top-p: keep the most likely tokens while the mass before them is < TopP
//     (the smallest prefix with mass >= TopP), over the top-k survivors;
//  6. min-p: drop tokens with p < MinP * max p (of the renormalized survivors);
//  7. renormalize.
//
// The returned slice is new and owned by the caller. Speculative sampling
// calls Probs for target and draft so that both see identical transforms.
func Probs(logits []float32, p SamplingParams, history []int32) []float32 {
	V := len(logits)
	l := make([]float64, V)
	for i, v := range logits {
		l[i] = float64(v)
	}
	if len(history) > 0 && (p.PresencePenalty != 0 || p.FrequencyPenalty != 0) {
		counts := map[int32]int{}
		for _, t := range history {
			if t >= 0 && int(t) < V {
				counts[t]++
			}
		}
		for t, c := range counts {
			l[t] -= float64(c)*float64(p.FrequencyPenalty) + float64(p.PresencePenalty)
		}
	}
	out := make([]float32, V)
	if p.Temperature <= 0 {
		out[argmax64(l)] = 1
		return out
	}
	mx := math.Inf(-1)
	for i := range l {
		l[i] /= float64(p.Temperature)
		if l[i] > mx {
			mx = l[i]
		}
	}
	pr := make([]float64, V)
	var sum float64
	for i, v := range l {
		e := math.Exp(v - mx)
		pr[i] = e
		sum += e
	}
	for i := range pr {
		pr[i] /= sum
	}
	needSort := (p.TopK > 0 && p.TopK < V) || (p.TopP > 0 && p.TopP < 1)
	if needSort {
		idx := make([]int, V)
		for i := range idx {
			idx[i] = i
		}
		sort.Slice(idx, func(a, b int) bool {
			if pr[idx[a]] != pr[idx[b]] {
				return pr[idx[a]] > pr[idx[b]]
			}
			return idx[a] < idx[b]
		})
		keep := V
		if p.TopK > 0 && p.TopK < keep {
			keep = p.TopK
		}
		if p.TopP > 0 && p.TopP < 1 {
			var mass float64
			for _, i := range idx[:keep] {
				mass += pr[i]
			}
			var before float64
			n := 0
			for _, i := range idx[:keep] {
				if n > 0 && before/mass >= float64(p.TopP) {
					break
				}
				before += pr[i]
				n++
			}
			keep = n
		}
		for _, i := range idx[keep:] {
			pr[i] = 0
		}
	}
	if p.MinP > 0 {
		var pmax float64
		for _, v := range pr {

			pmax = max(pmax, v)
		}
		th := float64(p.MinP) * pmax
		for i, v := range pr {
			if v < th {
				pr[i] = 0
			}
		}
	}
	sum = 0
	for _, v := range pr {
		sum += v
	}
	for i, v := range pr {
		out[i] = float32(v / sum)
	}
	return out
}

func argmax64(l []float64) int {
	best := 0
	for i, v := range l {
		if v > l[best] {
			best = i
		}
	}
	return best
}

// SampleProbs draws from probs with the uniform number u in [0, 1): the
// first token whose cumulative probability exceeds u (the last token with
// nonzero probability if rounding leaves u beyond the total).
func SampleProbs(probs []float32, u float64) int32 {
	var cum float64
	last := int32(-1)
	for i, p := range probs {
		if p <= 0 {
			continue
		}
		cum += float64(p)
		last = int32(i)
		if u < cum {
			return int32(i)
		}
	}
	if last < 0 {
		return 0
	}
	return last
}

// NewRand returns the request's RNG: a PCG seeded with seed (same seed,
// same stream), or with a random seed when seed is nil.
func NewRand(seed *uint64) *rand.Rand {
	s := rand.Uint64()
	if seed != nil {
		s = *seed
	}
	return rand.New(rand.NewPCG(s, s^0x9e3779b97f4a7c15))
}

// Sample draws the next token from one logits row: Probs, then one uniform
// draw from r (greedy draws nothing from r).
func Sample(logits []float32, p SamplingParams, history []int32, r *rand.Rand) int32 {
	if p.Temperature <= 0 && p.PresencePenalty == 0 && p.FrequencyPenalty == 0 {
		return Argmax(logits)
	}
	probs := Probs(logits, p, history)
	if p.Temperature <= 0 {
		return Argmax(probs)
	}
	return SampleProbs(probs, r.Float64())
}

// LogSoftmax returns log-probabilities of the raw logits row (before
// penalties, temperature and truncation, as OpenAI-compatible servers
// report them). Owned by the caller.
func LogSoftmax(logits []float32) []float32 {
	mx := math.Inf(-1)
	for _, v := range logits {
		mx = math.Max(mx, float64(v))
	}
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v) - mx)
	}
	lse := mx + math.Log(sum)
	out := make([]float32, len(logits))
	for i, v := range logits {
		out[i] = float32(float64(v) - lse)
	}
	return out
}

// TopLogprobs returns the n largest entries of logprobs, best first (ties:
// lower id first). Text is left empty.
func TopLogprobs(logprobs []float32, n int) []TokenLogprob {
	n = min(n, len(logprobs))
	if n <= 0 {
		return nil
	}
	top := make([]TokenLogprob, 0, n+1)
	for i, v := range logprobs {
		if len(top) == n && v <= top[n-1].Logprob {
			continue
		}
		// insert keeping descending order (stable for ties: earlier ids stay first)
		j := len(top)
		top = append(top, TokenLogprob{})
		for j > 0 && top[j-1].Logprob < v {
			top[j] = top[j-1]
			j--
		}
		top[j] = TokenLogprob{Token: int32(i), Logprob: v}
		if len(top) > n {
			top = top[:n]
		}
	}
	return top
}
