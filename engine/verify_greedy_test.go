package engine

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// refGreedyWalk is a reference greedy tree walk written independently of
// walkGreedy: at each node, the target's token (target(accepted tokens so
// far, row)) picks the first child carrying it, else it is the bonus.
func refGreedyWalk(toks, parents []int32, target func(acc []int32, row int) int32) ([]int, int32) {
	var path []int
	var acc []int32
	v := int32(-1)
	for {
		t := target(acc, int(v+1))
		found := -1
		for i, p := range parents {
			if p == v && toks[i] == t {
				found = i
				break
			}
		}
		if found < 0 {
			return path, t
		}
		path = append(path, found)
		acc = append(acc, toks[found])
		v = int32(found)
	}
}

// verifyArgmax (the device-argmax path), and verifyTree at temperature 0,
// plain and with penalties, take the same greedy walk as the reference on
// random trees whose tokens often match the target's choices.
func TestGreedyWalksMatchReference(t *testing.T) {
	const V = 6
	rng := rand.New(rand.NewPCG(3, 4))
	pen := SamplingParams{PresencePenalty: 1.5, FrequencyPenalty: 0.5}
	for trial := range 2000 {
		n := 1 + rng.IntN(12)
		toks, parents := make([]int32, n), make([]int32, n)
		for i := range n {
			parents[i] = int32(rng.IntN(i+1)) - 1
			toks[i] = int32(rng.IntN(3)) // few tokens: many matches
		}
		rows := make([]float32, (n+1)*V)
		for i := range rows {
			rows[i] = float32(rng.NormFloat64())
		}
		hist := []int32{int32(rng.IntN(V)), int32(rng.IntN(V))}
		argmax := make([]int32, n+1)
		for r := range argmax {
			argmax[r] = Argmax(rows[r*V : (r+1)*V])
		}
		plain := func(_ []int32, r int) int32 { return argmax[r] }
		penal := func(acc []int32, r int) int32 {
			return Argmax(Probs(rows[r*V:(r+1)*V], pen, append(append([]int32(nil), hist...), acc...)))
		}
		wantPath, wantBonus := refGreedyWalk(toks, parents, plain)
		want := fmt.Sprint(wantPath, wantBonus)
		if vd := verifyArgmax(toks, parents, argmax); fmt.Sprint(vd.path, vd.bonus) != want {
			t.Fatalf("trial %d: verifyArgmax %v %d, reference %s", trial, vd.path, vd.bonus, want)
		}
		if vd := verifyTree(toks, parents, nil, rows, V, SamplingParams{}, hist, nil, nil); fmt.Sprint(vd.path, vd.bonus) != want {
			t.Fatalf("trial %d: verifyTree %v %d, reference %s", trial, vd.path, vd.bonus, want)
		}
		wantPath, wantBonus = refGreedyWalk(toks, parents, penal)
		if vd := verifyTree(toks, parents, nil, rows, V, pen, hist, nil, nil); fmt.Sprint(vd.path, vd.bonus) != fmt.Sprint(wantPath, wantBonus) {
			t.Fatalf("trial %d: verifyTree with penalties %v %d, reference %v %d", trial, vd.path, vd.bonus, wantPath, wantBonus)
		}
	}
}
