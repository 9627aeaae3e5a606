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
