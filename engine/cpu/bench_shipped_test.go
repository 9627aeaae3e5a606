package cpu

import (
	"fmt"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/specgate/specgate/engine/backend"
	"github.com/specgate/specgate/engine/model"
)

// cpuTime is the process's user+system CPU time so far. On a shared,
// overloaded machine wall time per op mostly measures the CPU share the
// benchmark got; CPU time per op measures the work.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkMatmulHalfT: the LM-head matmul of the shipped target's shape
// (8192×384, binary16 weights: 6 MiB, more than L2) for T = 1, 2, 4, 8
// tokens on GOMAXPROCS threads: with the weights streamed once per call,
// cpu-ns/op grows with T only by the FMA work, not by weight traffic.
func BenchmarkMatmulHalfT(b *testing.B) {
	const in, out = 384, 8192
	w := make([]float32, in*out)
	for i := range w {
		w[i] = float32(i%13-6) * 0.125
	}
	wm := newWmat(w, out, in, true)
	for _, T := range []int{1, 2, 4, 8} {
		b.Run(fmt.Sprint(T), func(b *testing.B) {
			x, y := make([]float32, T*in), make([]float32, T*out)
			for i := range x {
				x[i] = float32(i%5) * 0.25
			}
			c0 := cpuTime()
			for b.Loop() {
				matmulJobs(fan(0), x, T, in, mmJob{y, &wm, out})
			}
			b.ReportMetric(float64(cpuTime()-c0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkThreadPolicy: the shipped target and draft, one-token decode
// steps (context 128..192) and 8-token chain forwards (context 128), on one
// thread and on two threads with matmul passes and attention parallel only
// from Options.MinParallelMACs multiply-adds (2^15: every pass of these models;
// 2^20, 2^22: only the large ones). Run it several times in a loop to
// interleave the settings on a shared machine and compare medians. It drives
// the backend directly (KV slot = position): the engine's Sequence is not
// reachable from package cpu.
func BenchmarkThreadPolicy(b *testing.B) {
	for _, dir := range []string{"../../models/specgate-target", "../../models/specgate-draft"} {
		cfg, w := loadShipped(b, dir)
		type setting struct {
			name    string
			threads int
			min     int
		}
		sets := []setting{{"threads=1", 1, 0}, {"threads=2,min=2^15", 2, 1 << 15}, {"threads=2,min=2^20", 2, 1 << 20},
			{"threads=2,min=2^22", 2, 1 << 22}, {"threads=2,min=2^25", 2, 1 << 25}}
		bs := map[string]*CPUBackend{}
		for _, set := range sets {
			be, err := New(cfg, w, 512, Options{Threads: set.threads, MinParallelMACs: set.min})
			if err != nil {
				b.Fatal(err)
			}
			defer be.Close()
			bs[set.name] = be
		}
		slots := func(lo, n int) []int32 {
			s := make([]int32, n)
			for i := range s {
				s[i] = int32(lo + i)
			}
			return s
		}
		for _, set := range sets {
			for _, n := range []int{1, 8} {
				b.Run(fmt.Sprintf("%s/%s/n=%d", dir[len("../../models/"):], set.name, n), func(b *testing.B) {
					be := bs[set.name]
					ctx := make([]int32, 128)
					for i := range ctx {
						ctx[i] = int32(i*53%8000 + 5)
					}
					pre := &backend.ForwardRequest{Tokens: ctx, Positions: slots(0, 128), Slots: slots(0, 128), LogitsRows: []int32{}}
					if err := be.Forward([]*backend.ForwardRequest{pre}); err != nil {
						b.Fatal(err)
					}
					toks, par := make([]int32, n), make([]int32, n)
					for i := range toks {
						toks[i], par[i] = int32(100+i), int32(i-1)
					}
					if n == 1 {
						par = nil
					}
					logits := make([]float32, n*cfg.VocabSize)
					cached := 128
					c0 := cpuTime()
					for b.Loop() {
						if n == 1 && cached >= 192 {
							cached = 128
						}
						r := &backend.ForwardRequest{CachedSlots: slots(0, cached), Tokens: toks, Positions: slots(cached, n),
							Slots: slots(cached, n), Parents: par, Logits: logits}
						if err := be.Forward([]*backend.ForwardRequest{r}); err != nil {
							b.Fatal(err)
						}
						if n == 1 {
							cached++
						}
					}
					b.ReportMetric(float64(cpuTime()-c0)/float64(b.N), "cpu-ns/op")
				})
			}
		}
	}
}

// BenchmarkForwardMix: the shipped target on one thread, chains of n = 1,
// 2, 4 and 8 tokens at context 128, interleaved (one of each per round, as
// bench engine's verification table does, without the engine around the
// backend), each forward timed alone. It reports the 10th percentile and
// the median per n and their ratios to n = 1: on a shared machine a
// percentile of single forwards is less disturbed than a mean. Run it
// pinned (taskset -c 1) and alternate binaries to compare two versions.
func BenchmarkForwardMix(b *testing.B) {
	dir := "../../models/specgate-target"
	cfg, w := loadShipped(b, dir)
	be, err := New(cfg, w, 512, Options{Threads: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	slots := func(lo, n int) []int32 {
		s := make([]int32, n)
		for i := range s {
			s[i] = int32(lo + i)
		}
		return s
	}
	ctx := make([]int32, 128)
	for i := range ctx {
		ctx[i] = int32(i*53%8000 + 5)
	}
	pre := &backend.ForwardRequest{Tokens: ctx, Positions: slots(0, 128), Slots: slots(0, 128), LogitsRows: []int32{}}
	if err := be.Forward([]*backend.ForwardRequest{pre}); err != nil {
		b.Fatal(err)
	}
	ns := []int{1, 2, 4, 8}
	reqs := make([]*backend.ForwardRequest, len(ns))
	for j, n := range ns {
		toks, par := make([]int32, n), make([]int32, n)
		for i := range toks {
			toks[i], par[i] = int32(100+i), int32(i-1)
		}
		reqs[j] = &backend.ForwardRequest{CachedSlots: slots(0, 128), Tokens: toks, Positions: slots(128, n),
			Slots: slots(128, n), Parents: par, Logits: make([]float32, n*cfg.VocabSize)}
	}
	d := make([][]float64, len(ns))
	for b.Loop() {
		for j := range ns {
			t0 := time.Now()
			if err := be.Forward(reqs[j : j+1]); err != nil {
				b.Fatal(err)
			}
			d[j] = append(d[j], float64(time.Since(t0).Nanoseconds())/1e3)
		}
	}
	q := func(v []float64, f float64) float64 {
		s := slices.Clone(v)
		slices.Sort(s)
		return s[int(f*float64(len(s)-1))]
	}
	for j, n := range ns {
		b.ReportMetric(q(d[j], 0.1), fmt.Sprintf("n%d-p10-us", n))
		b.ReportMetric(q(d[j], 0.5), fmt.Sprintf("n%d-p50-us", n))
		if n > 1 {
			b.ReportMetric(q(d[j], 0.1)/q(d[0], 0.1), fmt.Sprintf("x%d-p10", n))
		}
	}
}

// loadShipped loads a shipped model's config and weights, skipping the
// benchmark when the directory is not there.
func loadShipped(b *testing.B, dir string) (model.Config, *model.Weights) {
	b.Helper()
	if _, err := os.Stat(dir); err != nil {
		b.Skip(dir, " not present")
	}
	cfg, err := model.LoadConfig(dir)
	if err != nil {
		b.Fatal(err)
	}
	w, err := model.LoadWeights(dir, cfg)
	if err != nil {
		b.Fatal(err)
	}
	return cfg, w
}
