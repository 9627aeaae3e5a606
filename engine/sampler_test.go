package engine

import (
	"math"
	"testing"
)

func logitsOf(p ...float64) []float32 {
	out := make([]float32, len(p))
	for i, v := range p {
		out[i] = float32(math.Log(v))
	}
	return out
}

func near(t *testing.T, name string, got []float32, want []float64) {
	t.Helper()
	for i := range want {
		if math.Abs(float64(got[i])-want[i]) > 1e-6 {
			t.Fatalf("%s: got %v, want %v", name, got, want)
		}
	}
}

func TestProbsTransforms(t *testing.T) {
	l := logitsOf(0.5, 0.25, 0.125, 0.125)
	cases := []struct {
		name string
		p    SamplingParams
		hist []int32
		in   []float32
		want []float64
	}{
		{"greedy ties to lowest id", SamplingParams{}, nil, []float32{1, 3, 3, 2}, []float64{0, 1, 0, 0}},
		{"temperature 1 is softmax", SamplingParams{Temperature: 1}, nil, l, []float64{0.5, 0.25, 0.125, 0.125}},
		// mass before token 2 is exactly 0.75 >= 0.75: the cut keeps tokens 0 and 1.
		{"top-p exact cut", SamplingParams{Temperature: 1, TopP: 0.75}, nil, l, []float64{2. / 3, 1. / 3, 0, 0}},
		{"top-p just above", SamplingParams{Temperature: 1, TopP: 0.76}, nil, l, []float64{0.5 / 0.875, 0.25 / 0.875, 0.125 / 0.875, 0}},
		{"top-p 1 off", SamplingParams{Temperature: 1, TopP: 1}, nil, l, []float64{0.5, 0.25, 0.125, 0.125}},
		{"top-k ties by id", SamplingParams{Temperature: 1, TopK: 2}, nil, []float32{0, 1, 1, 1}, []float64{0, 0.5, 0.5, 0}},
		// min-p 0.3: threshold 0.15 keeps 0.5 and 0.25.
		{"min-p", SamplingParams{Temperature: 1, MinP: 0.3}, nil, l, []float64{2. / 3, 1. / 3, 0, 0}},
		// temperature 0.5 squares the probabilities: 0.25, 0.0625, 0.015625 x2 over 0.34375.
		{"temperature 0.5", SamplingParams{Temperature: 0.5}, nil, l, []float64{0.25 / 0.34375, 0.0625 / 0.34375, 0.015625 / 0.34375, 0.015625 / 0.34375}},
		// history [0 0 1], frequency 0.5, presence 1: logits [0 0 0] -> [-2 -1.5 0].
		{"penalties greedy", SamplingParams{FrequencyPenalty: 0.5, PresencePenalty: 1}, []int32{0, 0, 1}, []float32{0, 0, 0}, []float64{0, 0, 1}},
		{"penalties softmax", SamplingParams{Temperature: 1, FrequencyPenalty: 0.5, PresencePenalty: 1}, []int32{0, 0, 1}, []float32{0, 0, 0},
			func() []float64 {
				e := []float64{math.Exp(-2), math.Exp(-1.5), 1}
				s := e[0] + e[1] + e[2]
				return []float64{e[0] / s, e[1] / s, e[2] / s}
			}()},
		// negative presence penalty favours repeats: [0 0] with history [1], presence -1 -> [0 1].
		{"negative presence", SamplingParams{PresencePenalty: -1}, []int32{1}, []float32{0, 0}, []float64{0, 1}},
		// top-k 3 then top-p 0.5 over the renormalized survivors (0.5/0.875 >= 0.5 after the first).
		{"top-k then top-p", SamplingParams{Temperature: 1, TopK: 3, TopP: 0.5}, nil, l, []float64{1, 0, 0, 0}},
	}
	for _, c := range cases {
		near(t, c.name, Probs(c.in, c.p, c.hist), c.want)
	}
}

func TestSampleProbsAndSeed(t *testing.T) {
	p := []float32{0.25, 0, 0.5, 0.25}
	for _, c := range []struct {
		u    float64
		want int32
	}{{0, 0}, {0.2499, 0}, {0.25, 2}, {0.7499, 2}, {0.75, 3}, {0.99999, 3}, {1.5, 3}} {
		if got := SampleProbs(p, c.u); got != c.want {
			t.Fatalf("SampleProbs(u=%v) = %d, want %d", c.u, got, c.want)
		}
	}
	seed := uint64(42)
	params := SamplingParams{Temperature: 1, Seed: &seed}
	l := logitsOf(0.3, 0.3, 0.2, 0.2)
	draw := func() []int32 {
		r := NewRand(params.Seed)
		var out []int32
		for range 50 {
			out = append(out, Sample(l, params, nil, r))
		}
		return out
	}
	a, b := draw(), draw()
	seen := map[int32]bool{}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("same seed, different draws at %d", i)
		}
		seen[a[i]] = true
	}
	if len(seen) < 3 {
		t.Fatalf("50 draws from 4 tokens saw only %v", seen)
	}
}

func TestLogprobs(t *testing.T) {
	lp := LogSoftmax(logitsOf(0.5, 0.25, 0.125, 0.125))
	near(t, "logsoftmax", lp, []float64{math.Log(0.5), math.Log(0.25), math.Log(0.125), math.Log(0.125)})
	top := TopLogprobs(lp, 3)
	if len(top) != 3 || top[0].Token != 0 || top[1].Token != 1 || top[2].Token != 2 {
		t.Fatalf("top %+v, want ids 0 1 2", top)
	}
}

func TestStopHelpers(t *testing.T) {
	stops := []string{"END", "\n\n"}
	if i, ok := findStop("abc\n\nxEND", stops); !ok || i != 3 {
		t.Fatalf("findStop = %d %v, want 3", i, ok)
	}
	if _, ok := findStop("abcEN", stops); ok {
		t.Fatal("found a stop in a prefix")
	}
	for _, c := range []struct {
		s    string
		want int
	}{{"abcEN", 2}, {"abcE", 1}, {"abc\n", 1}, {"abc", 0}, {"ENDx", 0}} {
		if got := holdBack(c.s, stops); got != c.want {
			t.Fatalf("holdBack(%q) = %d, want %d", c.s, got, c.want)
		}
	}
}
