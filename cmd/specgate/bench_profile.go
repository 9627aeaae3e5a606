package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"syscall"
	"time"
)

// benchProfile profiles the measured intervals of the HTTP benchmarks
// (bench gateway, bench cache-http): a CPU profile and an allocation profile
// per interval, plus CPU time and allocations per request for the table.
//
//	specgate bench cache-http -entries 10000 -cpuprofile /tmp/ch -memprofile /tmp/ch
//	go tool pprof -top /tmp/ch-10000-exact-c16.cpu.pprof
//	go tool pprof -top -sample_index=alloc_space -base /tmp/ch-10000-exact-c16.allocs0.pprof /tmp/ch-10000-exact-c16.allocs.pprof
//
// The allocation profile is the process's cumulative one, written right
// before (allocs0) and right after (allocs) the interval; -base subtracts.
type benchProfile struct {
	cpuPrefix, memPrefix string
}

func (p *benchProfile) register(fs *flag.FlagSet) {
	fs.StringVar(&p.cpuPrefix, "cpuprofile", "", "write a CPU profile of each measured interval to PREFIX-<point>.cpu.pprof")
	fs.StringVar(&p.memPrefix, "memprofile", "", "write the allocation profile before and after each measured interval to PREFIX-<point>.allocs0.pprof / .allocs.pprof (diff with pprof -base)")
}

// intervalStats is what one measured interval cost this process.
type intervalStats struct {
	cpu     time.Duration // user + system CPU
	mallocs uint64        // heap allocations
	bytes   uint64        // heap bytes allocated
}

// perReq divides the stats by n requests: CPU µs, allocations, bytes.
func (s intervalStats) perReq(n int64) (cpuUS, allocs, bytes float64) {
	d := float64(max(n, 1))
	return float64(s.cpu.Microseconds()) / d, float64(s.mallocs) / d, float64(s.bytes) / d
}

// processCPU is this process's user+system CPU time so far (the gateway and
// the cache; wrk is another process). On a shared machine CPU per request is
// steadier than wall-clock latency.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func writeAllocs(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// start begins the measured interval called point (a file-name-safe word);
// stop ends it.
func (p *benchProfile) start(point string) (stop func() (intervalStats, error), err error) {
	if p.memPrefix != "" {
		runtime.GC()
		if err := writeAllocs(fmt.Sprintf("%s-%s.allocs0.pprof", p.memPrefix, point)); err != nil {
			return nil, fmt.Errorf("memprofile: %w", err)
		}
	}
	var cpuFile *os.File
	if p.cpuPrefix != "" {
		if cpuFile, err = os.Create(fmt.Sprintf("%s-%s.cpu.pprof", p.cpuPrefix, point)); err != nil {
			return nil, fmt.Errorf("cpuprofile: %w", err)
		}
		if err := pprof.StartCPUProfile(cpuFile); err != nil {
			cpuFile.Close()
			return nil, fmt.Errorf("cpuprofile: %w", err)
		}
	}
	var ms0 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	cpu0 := processCPU()
	return func() (intervalStats, error) {
		st := intervalStats{cpu: processCPU() - cpu0}
		var ms1 runtime.MemStats
		runtime.ReadMemStats(&ms1)
		st.mallocs, st.bytes = ms1.Mallocs-ms0.Mallocs, ms1.TotalAlloc-ms0.TotalAlloc
		if cpuFile != nil {
			pprof.StopCPUProfile()
			if err := cpuFile.Close(); err != nil {
				return st, fmt.Errorf("cpuprofile: %w", err)
			}
		}
		if p.memPrefix != "" {
			// The allocation profile is as of the last completed GC: without
			// this one, an interval with no GC of its own (a large heap after
			// the cache fill) diffs to nothing against allocs0.
			runtime.GC()
			if err := writeAllocs(fmt.Sprintf("%s-%s.allocs.pprof", p.memPrefix, point)); err != nil {
				return st, fmt.Errorf("memprofile: %w", err)
			}
		}
		return st, nil
	}, nil
}
