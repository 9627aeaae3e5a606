package policy

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
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
	Bytes    int64 // sum of the sizes of all requests
	HitBytes int64 // sum of the sizes of the requests that hit
}

// HitRatio is Hits/Requests (0 for an empty trace).
func (r Result) HitRatio() float64 {
	if r.Requests == 0 {
		return 0
	}
	return float64(r.Hits) / float64(r.Requests)
}

// ByteHitRatio is HitBytes/Bytes (0 when no bytes were requested).
func (r Result) ByteHitRatio() float64 {
	if r.Bytes == 0 {
		return 0
	}
	return float64(r.HitBytes) / float64(r.Bytes)
}

// Simulate replays t against p the way a cache uses a policy: Get each key,
// and on a miss Add it with the request's size and cost 1. Policy and
// Capacity of the result are left for the caller.
func Simulate(p Policy[uint64], t *Trace) Result {
	res := Result{Trace: t.Name, Requests: int64(len(t.Keys))}
	for i, k := range t.Keys {
		size := t.Size(i)
		res.Bytes += size
		if p.Get(k) {
			res.Hits++
			res.HitBytes += size
			continue
		}
		p.Add(k, size, 1)
	}
	return res
}

// SimPolicy returns the named policy over uint64 keys bounded by c,
// deterministic across runs (W-TinyLFU hashes with splitmix64 instead of a
// random seed).
func SimPolicy(name string, c Capacity) (Policy[uint64], error) {
	if name == "wtinylfu" {
		if err := c.Validate(); err != nil {
			return nil, err
		}
		return NewWTinyLFU[uint64](c, mix64), nil
	}
	return New[uint64](name, c)
}

// WithSizes returns a copy of t in which every request for a key has that
// key's fixed size, drawn log-uniformly from [minSize, maxSize] by hashing
// the key with seed (so sizes are uncorrelated with popularity).
func WithSizes(t *Trace, minSize, maxSize int64, seed uint64) *Trace {
	minSize = max(minSize, 1)
	maxSize = max(maxSize, minSize)
	out := &Trace{Name: t.Name + "-sized", Keys: t.Keys, Sizes: make([]int64, len(t.Keys))}
	ratio := math.Log(float64(maxSize) / float64(minSize))
	for i, k := range t.Keys {
		u := float64(mix64(k^mix64(seed))>>11) / (1 << 53)
		out.Sizes[i] = min(maxSize, int64(math.Round(float64(minSize)*math.Exp(u*ratio))))
	}
	return out
}

// distinctBytes is the sum over distinct keys of each key's last size.
func distinctBytes(t *Trace) int64 {
	sizes := make(map[uint64]int64, len(t.Keys)/4)
	for i, k := range t.Keys {
		sizes[k] = t.Size(i)
	}
	var b int64
	for _, s := range sizes {
		b += s
	}
	return b
}

// TableOrder is the column order of the hit-ratio table.
var TableOrder = []string{"lru", "fifo", "lfu", "gdsf", "s3fifo", "wtinylfu"}

// Row is one line of a hit-ratio table: one trace at one cache size.
type Row struct {
	Trace      string
	Distinct   int // distinct keys
	Capacity   Capacity
	Fraction   float64            // of distinct keys (entries) or of distinct bytes (bytes)
	Ratios     map[string]float64 // policy name (and "belady") -> hit ratio
	ByteRatios map[string]float64 // policy name -> byte hit ratio
}

// RunTable simulates every policy in names and Belady on every trace at
// every fraction of its distinct keys (at least one entry), using up to
// workers goroutines (one per simulation). Rows come back in trace, then
// fraction order.
func RunTable(traces []*Trace, fractions []float64, names []string, workers int) ([]Row, error) {
	var rows []Row
	for _, t := range traces {
		d := t.Distinct()
		for _, f := range fractions {
			c := Capacity{MaxEntries: max(1, int(float64(d)*f))}
			rows = append(rows, Row{Trace: t.Name, Distinct: d, Capacity: c, Fraction: f})
		}
	}
	return rows, runRows(rows, traces, len(fractions), append(names[:len(names):len(names)], "belady"), workers)
}

// RunSizedTable simulates every policy in names on every trace with a
// byte capacity of each fraction of the trace's distinct bytes. There is no
// Belady column: with unequal sizes the offline optimum is NP-hard and
// Belady's rule is not a bound.
func RunSizedTable(traces []*Trace, fractions []float64, names []string, workers int) ([]Row, error) {
	var rows []Row
	for _, t := range traces {
		d, b := t.Distinct(), distinctBytes(t)
		for _, f := range fractions {
			c := Capacity{MaxBytes: max(1, int64(float64(b)*f))}
			rows = append(rows, Row{Trace: t.Name, Distinct: d, Capacity: c, Fraction: f})
		}
	}
	return rows, runRows(rows, traces, len(fractions), names, workers)
}

// runRows fills rows[i*perTrace+j] by simulating names on traces[i].
func runRows(rows []Row, traces []*Trace, perTrace int, names []string, workers int) error {
	type job struct {
		row  int
		name string
		t    *Trace
	}
	var jobs []job
	for i := range rows {
		rows[i].Ratios = map[string]float64{}
		rows[i].ByteRatios = map[string]float64{}
		for _, n := range names {
			jobs = append(jobs, job{i, n, traces[i/perTrace]})
		}
	}
	var (
		mu    sync.Mutex
		wg    sync.WaitGroup
		first error
		ch    = make(chan job)
	)
	for range max(workers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range ch {
				c := rows[j.row].Capacity
				var r Result
				if j.name == "belady" {
					r = Belady(j.t, c.MaxEntries)
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
				rows[j.row].ByteRatios[j.name] = r.ByteHitRatio()
				mu.Unlock()
			}
		}()
	}
	for _, j := range jobs {
		ch <- j
	}
	close(ch)
	wg.Wait()
	return first
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// WriteTable prints rows of RunTable as a Markdown table of hit ratios in
// percent, one column per policy in names, then Belady.
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
		fmt.Fprintf(&b, "| %s | %d | %d | %s |", r.Trace, r.Distinct, r.Capacity.MaxEntries, strconv.FormatFloat(100*r.Fraction, 'f', -1, 64))
		for _, n := range append(names[:len(names):len(names)], "belady") {
			fmt.Fprintf(&b, " %.2f |", 100*r.Ratios[n])
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteSizedTable prints rows of RunSizedTable as a Markdown table whose
// cells are "hit ratio / byte hit ratio" in percent.
func WriteSizedTable(w io.Writer, rows []Row, names []string) error {
	var b strings.Builder
	b.WriteString("| trace | distinct keys | cache (bytes) | cache % of distinct bytes |")
	for _, n := range names {
		b.WriteString(" " + n + " |")
	}
	b.WriteString("\n|---|---:|---:|---:|")
	for range names {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %d | %d | %s |", r.Trace, r.Distinct, r.Capacity.MaxBytes, strconv.FormatFloat(100*r.Fraction, 'f', -1, 64))
		for _, n := range names {
			fmt.Fprintf(&b, " %.2f / %.2f |", 100*r.Ratios[n], 100*r.ByteRatios[n])
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
	noSized := fs.Bool("no-sized", false, "skip the byte-capacity table")
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
	var loaded []*Trace
	for _, f := range files {
		t, err := LoadTraceFile(f, 0)
		if err != nil {
			return err
		}
		loaded = append(loaded, t)
	}
	traces := append([]*Trace{
		ZipfTrace(*keys, *requests, 0.8, *seed),
		ZipfTrace(*keys, *requests, 1.0, *seed+1),
		ScanTrace(*keys, *requests, 1.0, *scanLen, *scanFrac, *seed+2),
	}, loaded...)
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
	sims := len(rows) * (len(names) + 1)
	if !*noSized {
		sized := WithSizes(traces[1], 1, 1024, *seed)
		srows, err := RunSizedTable([]*Trace{sized}, fractions, names, *workers)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "\nByte capacity, sizes log-uniform in [1, 1024] bytes per key (fixed per key, independent of popularity), cost 1; "+
			"cells are hit ratio / byte hit ratio (%%). No Belady column: with unequal sizes it is not a bound.\n\n")
		if err := WriteSizedTable(w, srows, names); err != nil {
			return err
		}
		sims += len(srows) * len(names)
	}
	fmt.Fprintf(w, "\n(%d simulations in %.1fs on %d workers)\n", sims, time.Since(start).Seconds(), *workers)
	return nil
}
