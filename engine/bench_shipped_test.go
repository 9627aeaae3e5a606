package engine

import (
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"
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

// shippedTarget loads models/specgate-target for a benchmark (skips when absent).
func shippedTarget(b *testing.B) *Model {
	b.Helper()
	dir := "../models/specgate-target"
	if _, err := os.Stat(dir); err != nil {
		b.Skip("models/specgate-target not present")
	}
	m, err := Load(dir, LoadOptions{KVTokens: 2048, DisablePrefixCache: true, SkipTokenizer: true})
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// BenchmarkDecodeShipped: tokens/s of one-token decode steps at batch 1 on
// the shipped target (12.6M parameters), context 64..320 tokens.
func BenchmarkDecodeShipped(b *testing.B) {
	m := shippedTarget(b)
	defer m.Close()
	s := m.NewSequence()
	toks := make([]int32, 64)
	for i := range toks {
		toks[i] = int32(i*37%8000 + 5)
	}
	if _, err := s.Forward(toks, nil, []int32{}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	c0 := cpuTime()
	for b.Loop() {
		if s.Len() >= 320 {
			s.Truncate(64)
		}
		if _, err := s.Forward([]int32{5}, nil, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpuTime()-c0)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tok/s")
}

// BenchmarkForwardN: one Sequence.Forward of n tokens (a chain-shaped tree,
// as in speculative verification, dropped again with KeepTree(nil)) at a
// fixed context of 256 tokens on the shipped target. ns/op over n=1's is the
// cost of verifying n tokens in decode steps.
func BenchmarkForwardN(b *testing.B) {
	m := shippedTarget(b)
	defer m.Close()
	ctx := make([]int32, 256)
	for i := range ctx {
		ctx[i] = int32(i*53%8000 + 5)
	}
	for _, n := range []int{1, 2, 4, 8} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			s := m.NewSequence()
			defer s.Free()
			if _, err := s.Forward(ctx, nil, []int32{}); err != nil {
				b.Fatal(err)
			}
			toks, par := make([]int32, n), make([]int32, n)
			for i := range toks {
				toks[i], par[i] = int32(100+i), int32(i-1)
			}
			c0 := cpuTime()
			for b.Loop() {
				if _, err := s.Forward(toks, par, nil); err != nil {
					b.Fatal(err)
				}
				if err := s.KeepTree(nil); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuTime()-c0)/float64(b.N), "cpu-ns/op")
		})
	}
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
				matmulJobs(0, x, T, in, mmJob{y, &wm, out})
			}
			b.ReportMetric(float64(cpuTime()-c0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkThreadPolicy: the shipped target and draft, one-token decode
// steps (context 128..192) and 8-token chain forwards (context 128), on one
// thread and on two threads with matmul passes and attention parallel only
// from minParallelMACs multiply-adds (2^15: every pass of these models;
// 2^20, 2^22: only the large ones). Run it several times in a loop to
// interleave the settings on a shared machine and compare medians.
func BenchmarkThreadPolicy(b *testing.B) {
	saved := minParallelMACs
	defer func() { minParallelMACs = saved }()
	for _, dir := range []string{"../models/specgate-target", "../models/specgate-draft"} {
		if _, err := os.Stat(dir); err != nil {
			b.Skip(dir, " not present")
		}
		ms := map[int]*Model{}
		for _, th := range []int{1, 2} {
			m, err := Load(dir, LoadOptions{KVTokens: 512, DisablePrefixCache: true, SkipTokenizer: true, Threads: th})
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			ms[th] = m
		}
		for _, set := range []struct {
			name    string
			threads int
			min     int
		}{{"threads=1", 1, saved}, {"threads=2,min=2^15", 2, 1 << 15}, {"threads=2,min=2^20", 2, 1 << 20}, {"threads=2,min=2^22", 2, 1 << 22}, {"threads=2,min=2^25", 2, 1 << 25}} {
			for _, n := range []int{1, 8} {
				b.Run(fmt.Sprintf("%s/%s/n=%d", dir[len("../models/"):], set.name, n), func(b *testing.B) {
					minParallelMACs = set.min
					defer func() { minParallelMACs = saved }()
					s := ms[set.threads].NewSequence()
					defer s.Free()
					ctx := make([]int32, 128)
					for i := range ctx {
						ctx[i] = int32(i*53%8000 + 5)
					}
					if _, err := s.Forward(ctx, nil, []int32{}); err != nil {
						b.Fatal(err)
					}
					toks, par := make([]int32, n), make([]int32, n)
					for i := range toks {
						toks[i], par[i] = int32(100+i), int32(i-1)
					}
					if n == 1 {
						par = nil
					}
					c0 := cpuTime()
					for b.Loop() {
						if n == 1 && s.Len() >= 192 {
							s.Truncate(128)
						}
						if _, err := s.Forward(toks, par, nil); err != nil {
							b.Fatal(err)
						}
						if n > 1 {
							if err := s.KeepTree(nil); err != nil {
								b.Fatal(err)
							}
						}
					}
					b.ReportMetric(float64(cpuTime()-c0)/float64(b.N), "cpu-ns/op")
				})
			}
		}
	}
}
