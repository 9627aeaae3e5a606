package policy

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Result is the outcome of replaying one trace against one policy.
type Result struct {
	Policy   string
	Trace    string
	Capacity int // entries
	Requests int64
	Hits     int64
}

// HitRatio is Hits/Requests (0 for an empty trace).
func (r Result) HitRatio() float64 {
	if r.Requests == 0 {
		return 0
	}
	return float64(r.Hits) / float64(r.Requests)
}

// Simulate replays t against p the way a cache uses a policy: Get each key,
// and on a miss Add it with the request's size and cost 1. It returns the
// hit count; Policy and Capacity of the result are left for the caller.
func Simulate(p Policy[uint64], t *Trace) Result {
	res := Result{Trace: t.Name, Requests: int64(len(t.Keys))}
	for i, k := range t.Keys {
		if p.Get(k) {
			res.Hits++
			continue
		}
		p.Add(k, t.Size(i), 1)
	}
	return res
}

// SimPolicy returns the named policy over uint64 keys with room for
// capacity entries, deterministic across runs (W-TinyLFU hashes with
// splitmix64 instead of a random seed).
func SimPolicy(name string, capacity int) (Policy[uint64], error) {
	c := Capacity{MaxEntries: capacity}
	if name == "wtinylfu" {
		if err := c.Validate(); err != nil {
			return nil, err
		}
		return NewWTinyLFU[uint64](c, mix64), nil
	}
	return New[uint64](name, c)
}

// TableOrder is the column order of the hit-ratio table.
var TableOrder = []string{"lru", "fifo", "lfu", "gdsf", "s3fifo", "wtinylfu"}

// Row is one line of the hit-ratio table: one trace at one cache size.
type Row struct {
	Trace    string
	Distinct int
	Capacity int
	Fraction float64
	Ratios   map[string]float64 // policy name (and "belady") -> hit ratio
}

// RunTable simulates every policy in names and Belady on every trace at
// every fraction of its distinct keys (at least one entry), using up to
// workers goroutines (one per simulation). Rows come back in trace, then
// fraction order.
func RunTable(traces []*Trace, fractions []float64, names []string, workers int) ([]Row, error) {
	if workers < 1 {
		workers = 1
	}
	var rows []Row
	type job struct {
		row  int
		name string
		t    *Trace
	}
	var jobs []job
	for _, t := range traces {
		d := t.Distinct()
		for _, f := range fractions {
			c := max(1, int(float64(d)*f))
			rows = append(rows, Row{Trace: t.Name, Distinct: d, Capacity: c, Fraction: f, Ratios: map[string]float64{}})
			for _, n := range append(names[:len(names):len(names)], "belady") {
				jobs = append(jobs, job{len(rows) - 1, n, t})
			}
		}
	}
	var (
		mu    sync.Mutex
		wg    sync.WaitGroup
		first error
		ch    = make(chan job)
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range ch {
				c := rows[j.row].Capacity
				var r Result
				if j.name == "belady" {
					r = Belady(j.t, c)
				} else {
					p, err := SimPolicy(j.name, c)
					if err != nil {
						mu.Lock()
						first = cmpErr(first, err)
						mu.Unlock()
						continue
					}
					r = Simulate(p, j.t)
				}
				mu.Lock()
				rows[j.row].Ratios[j.name] = r.HitRatio()
				mu.Unlock()
			}
		}()
	}
	for _, j := range jobs {
		ch <- j
	}
	close(ch)
	wg.Wait()
	return rows, first
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// WriteTable prints rows as a Markdown table of hit ratios in percent, one
// column per policy in names, then Belady.
func WriteTable(w io.Writer, rows []Row, names []string) error {
	var b strings.Builder
	b.WriteString("| trace | distinct keys | cache (entries) | cache % |")
	for _, n := range names {
		b.WriteString(" " + n + " |")
	}
	b.WriteString(" belady |\n|---|---:|---:|---:|")
	for range names {
		b.WriteString("---:|")
	}
	b.WriteString("---:|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %d | %d | %s |", r.Trace, r.Distinct, r.Capacity, strconv.FormatFloat(100*r.Fraction, 'f', -1, 64))
		for _, n := range append(names[:len(names):len(names)], "belady") {
			fmt.Fprintf(&b, " %.2f |", 100*r.Ratios[n])
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// ErrUsage is returned by RunBench for bad flags.
var ErrUsage = errors.New("policy: bench usage")

// PolicyBench runs RunBench with output to standard output; it is the body of
// `specgate bench-policy` and can be called by any bench dispatcher.
func PolicyBench(args []string) error { return RunBench(os.Stdout, args) }

// RunBench parses args (see -h), builds the Zipf 0.8, Zipf 1.0 and
// scan-mix traces (plus -trace files), simulates every policy and Belady at
// each cache size, and writes the Markdown hit-ratio table to w.
func RunBench(w io.Writer, args []string) error {
	fs := flag.NewFlagSet("bench-policy", flag.ContinueOnError)
	fs.SetOutput(w)
	keys := fs.Int("keys", 100_000, "Zipf key space")
	requests := fs.Int("requests", 1_000_000, "requests per generated trace")
	seed := fs.Uint64("seed", 1, "random seed of the generated traces")
	sizes := fs.String("sizes", "0.001,0.01,0.1", "cache sizes as fractions of each trace's distinct keys")
	pols := fs.String("policies", strings.Join(TableOrder, ","), "policies to simulate")
	scanLen := fs.Int("scan-len", 20_000, "length of each scan in the scan-mix trace")
	scanFrac := fs.Float64("scan-frac", 0.3, "share of scan requests in the scan-mix trace")
	var files []string
	fs.Func("trace", "also simulate this text trace (one key per line, optional size); repeatable", func(s string) error {
		files = append(files, s)
		return nil
	})
	workers := fs.Int("parallel", runtime.GOMAXPROCS(0), "simulations run at once")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	if *keys <= 0 || *requests <= 0 || *requests > DefaultMaxRequests {
		return fmt.Errorf("%w: -keys %d and -requests %d must be in 1..%d", ErrUsage, *keys, *requests, DefaultMaxRequests)
	}
	var fractions []float64
	for _, s := range strings.Split(*sizes, ",") {
		f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || f <= 0 || f > 1 {
			return fmt.Errorf("%w: -sizes entry %q is not in (0,1]", ErrUsage, s)
		}
		fractions = append(fractions, f)
	}
	var names []string
	for _, n := range strings.Split(*pols, ",") {
		n = strings.TrimSpace(n)
		if _, err := New[uint64](n, Capacity{}); err != nil {
			return fmt.Errorf("%w: -policies: %w", ErrUsage, err)
		}
		names = append(names, n)
	}
	start := time.Now()
	traces := []*Trace{
		ZipfTrace(*keys, *requests, 0.8, *seed),
		ZipfTrace(*keys, *requests, 1.0, *seed+1),
		ScanTrace(*keys, *requests, 1.0, *scanLen, *scanFrac, *seed+2),
	}
	for _, f := range files {
		t, err := LoadTraceFile(f, 0)
		if err != nil {
			return err
		}
		traces = append(traces, t)
	}
	rows, err := RunTable(traces, fractions, names, *workers)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "Hit ratio (%%), Get then Add on miss, unit sizes, capacity in entries. "+
		"Generated traces: %d requests, Zipf over %d keys, seed %d; scan-mix = Zipf 1.0 with %.0f%% of requests in scans of %d new keys.\n\n",
		*requests, *keys, *seed, 100**scanFrac, *scanLen)
	if err := WriteTable(w, rows, names); err != nil {
		return err
	}
	fmt.Fprintf(w, "\n(%d simulations in %.1fs on %d workers)\n", len(rows)*(len(names)+1), time.Since(start).Seconds(), *workers)
	return nil
}
