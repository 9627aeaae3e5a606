package cpu

import (
	"math"
	"runtime"
	"testing"
)

// Options are per backend, zero values are the defaults, and the fan-out
// changes who computes a row, never its bits: a backend fanning every pass
// out over 3 threads gives the logits of one running all on one thread.
func TestOptionsPerBackend(t *testing.T) {
	for name, cfg := range testConfigs() {
		w := RandomWeights(cfg, 3)
		one, err := New(cfg, w, 64, Options{Threads: 1})
		if err != nil {
			t.Fatal(err)
		}
		wide, err := New(cfg, w, 64, Options{Threads: 3, MinParallelMACs: 1})
		if err != nil {
			t.Fatal(err)
		}
		def, err := NewCPUBackend(cfg, w, 64, 0)
		if err != nil {
			t.Fatal(err)
		}
		if one.par != (fanout{1, DefaultMinParallelMACs}) || wide.par != (fanout{3, 1}) ||
			def.par != (fanout{runtime.GOMAXPROCS(0), DefaultMinParallelMACs}) {
			t.Fatalf("%s: fan-outs %+v %+v %+v", name, one.par, wide.par, def.par)
		}
		if wide.par.threadsFor(1) != 3 || one.par.threadsFor(1<<30) != 1 || def.par.threadsFor(DefaultMinParallelMACs-1) != 1 {
			t.Fatalf("%s: threadsFor", name)
		}
		V := cfg.VocabSize
		run := func(b *CPUBackend) [][]float32 {
			seq := func(lo, n int) []int32 {
				s := make([]int32, n)
				for i := range s {
					s[i] = int32(lo + i)
				}
				return s
			}
			reqs := []*ForwardRequest{
				{Tokens: []int32{1, 5, 9, 2, 7, 3, 11, 4, 6}, Positions: seq(0, 9), Slots: seq(0, 9), Logits: make([]float32, 9*V)},
				{CachedSlots: seq(0, 4), Tokens: []int32{8, 10, 12}, Positions: []int32{4, 5, 5}, Slots: seq(20, 3), Parents: []int32{-1, 0, -1}, Logits: make([]float32, 3*V)},
			}
			for _, r := range reqs {
				if err := b.Forward([]*ForwardRequest{r}); err != nil {
					t.Fatal(err)
				}
			}
			return [][]float32{reqs[0].Logits, reqs[1].Logits}
		}
		want := run(one)
		for bn, b := range map[string]*CPUBackend{"3 threads from 1 MAC": wide, "default": def} {
			got := run(b)
			for r := range want {
				for i := range want[r] {
					if math.Float32bits(got[r][i]) != math.Float32bits(want[r][i]) {
						t.Fatalf("%s, %s: request %d logit %d: %v, one thread %v", name, bn, r, i, got[r][i], want[r][i])
					}
				}
			}
		}
	}
}
