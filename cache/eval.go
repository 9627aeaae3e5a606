package cache

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
)

// ErrPairs reports a malformed labelled-pairs file.
var ErrPairs = errors.New("cache: bad pairs file")

// Pair is one labelled example of the quality set: would a cached answer to
// A be a correct answer to B? Kind is "paraphrase" for positives and the
// hard-negative family otherwise (negation, number, date, entity, role,
// antonym, topic).
type Pair struct {
	A     string `json:"a"`
	B     string `json:"b"`
	Label bool   `json:"label"`
	Kind  string `json:"kind"`
	Topic string `json:"topic"`
}

// LoadPairs reads JSON lines of Pair (at most 100 000 lines of 64 KiB).
func LoadPairs(r io.Reader) ([]Pair, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<10)
	var out []Pair
	for line := 1; sc.Scan(); line++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		if len(out) >= 100000 {
			return nil, fmt.Errorf("%w: more than 100000 pairs", ErrPairs)
		}
		var p Pair
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrPairs, line, err)
		}
		if p.A == "" || p.B == "" || p.Kind == "" {
			return nil, fmt.Errorf("%w: line %d: empty a, b or kind", ErrPairs, line)
		}
		if p.Label != (p.Kind == "paraphrase") {
			return nil, fmt.Errorf("%w: line %d: label %v disagrees with kind %q", ErrPairs, line, p.Label, p.Kind)
		}
		out = append(out, p)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPairs, err)
	}
	return out, nil
}

// IsHoldout reports whether a pair belongs to the held-out split (about 30%,
// by a hash of its texts, so the split never depends on the order of lines).
// Defaults are tuned on the other split only.
func IsHoldout(p Pair) bool {
	return fnv64(9, p.A, p.B)%10 < 3
}

// Split returns the tuning and held-out splits.
func Split(ps []Pair) (tune, holdout []Pair) {
	for _, p := range ps {
		if IsHoldout(p) {
			holdout = append(holdout, p)
		} else {
			tune = append(tune, p)
		}
	}
	return tune, holdout
}

// Scored is a pair with its cosine similarity and guard verdict.
type Scored struct {
	Pair
	Exact bool    // the normalized texts are equal (exact-tier hit)
	Sim   float32 // cosine similarity of the embeddings
	Guard string  // Guard(B, A): "" = would be served
}

// ScorePairs embeds both sides of each pair as the pipeline does (normalized
// key text, B as the query, A as the cached key).
func ScorePairs(ctx context.Context, emb Embedder, ps []Pair, caseFold bool) ([]Scored, error) {
	out := make([]Scored, len(ps))
	for i, p := range ps {
		a, b := Normalize(p.A, caseFold), Normalize(p.B, caseFold)
		vs, err := emb.Embed(ctx, []string{a, b})
		if err != nil {
			return nil, fmt.Errorf("cache: scoring pair %d: %w", i, err)
		}
		out[i] = Scored{Pair: p, Exact: a == b, Sim: Dot(vs[0], vs[1]), Guard: Guard(b, a)}
	}
	return out, nil
}

// Quality is the confusion matrix of a decision rule over scored pairs.
type Quality struct {
	Threshold          float32
	Guard              bool
	TP, FP, FN, TN     int
	Precision, Recall  float64
	F1                 float64
	FalsePositiveKinds map[string]int // kind of each negative that was served
	GuardRejects       map[string]int // guard reason of each pair above threshold that the guard stopped
}

// Served reports whether the pipeline would serve A's answer for B.
func (s Scored) Served(threshold float32, guard bool) bool {
	if s.Exact {
		return true
	}
	return s.Sim >= threshold && (!guard || s.Guard == "")
}

// Evaluate computes precision, recall and F1 of serving at threshold, with or
// without the guard. Precision of a rule that serves nothing is 1.
func Evaluate(ss []Scored, threshold float32, guard bool) Quality {
	q := Quality{Threshold: threshold, Guard: guard, FalsePositiveKinds: map[string]int{}, GuardRejects: map[string]int{}}
	for _, s := range ss {
		served := s.Served(threshold, guard)
		if guard && !s.Exact && s.Sim >= threshold && s.Guard != "" {
			q.GuardRejects[s.Guard]++
		}
		switch {
		case served && s.Label:
			q.TP++
		case served && !s.Label:
			q.FP++
			q.FalsePositiveKinds[s.Kind]++
		case !served && s.Label:
			q.FN++
		default:
			q.TN++
		}
	}
	q.Precision = 1
	if q.TP+q.FP > 0 {
		q.Precision = float64(q.TP) / float64(q.TP+q.FP)
	}
	if q.TP+q.FN > 0 {
		q.Recall = float64(q.TP) / float64(q.TP+q.FN)
	}
	if q.Precision+q.Recall > 0 {
		q.F1 = 2 * q.Precision * q.Recall / (q.Precision + q.Recall)
	}
	return q
}

// BestThreshold returns the threshold (on a 0.01 grid in [lo, hi]) with the
// highest recall whose precision is at least minPrecision, ties broken by the
// higher threshold (the safer one). ok is false when none qualifies.
func BestThreshold(ss []Scored, guard bool, lo, hi, minPrecision float32) (best Quality, ok bool) {
	var grid []float32
	for t := hi; t >= lo-1e-6; t -= 0.01 {
		grid = append(grid, t)
	}
	sort.Slice(grid, func(i, j int) bool { return grid[i] > grid[j] })
	for _, t := range grid {
		q := Evaluate(ss, t, guard)
		if q.Precision >= float64(minPrecision) && (!ok || q.Recall > best.Recall) {
			best, ok = q, true
		}
	}
	return best, ok
}
