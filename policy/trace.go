package policy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
)

// Trace errors.
var (
	// ErrTraceFormat is returned for a malformed trace line.
	ErrTraceFormat = errors.New("policy: bad trace")
	// ErrTraceTooLong is returned when a trace exceeds the request limit.
	ErrTraceTooLong = errors.New("policy: trace too long")
)

// Trace is a sequence of requests for the simulator.
type Trace struct {
	Name  string
	Keys  []uint64 // Keys[i] is the key of request i
	Sizes []int64  // Sizes[i] is the size of request i; nil means 1 for all
}

// Len is the number of requests.
func (t *Trace) Len() int { return len(t.Keys) }

// Size returns the size of request i.
func (t *Trace) Size(i int) int64 {
	if t.Sizes == nil {
		return 1
	}
	return t.Sizes[i]
}

// Distinct is the number of distinct keys.
func (t *Trace) Distinct() int {
	seen := make(map[uint64]struct{}, len(t.Keys)/4)
	for _, k := range t.Keys {
		seen[k] = struct{}{}
	}
	return len(seen)
}

// zipf samples ranks 0..n-1 with P(r) ∝ 1/(r+1)^alpha by inverting the
// cumulative distribution (exact for any alpha >= 0, unlike math/rand's
// Zipf, which needs alpha > 1).
type zipf struct {
	cdf []float64
	rng *rand.Rand
}

func newZipf(n int, alpha float64, rng *rand.Rand) *zipf {
	cdf := make([]float64, n)
	sum := 0.0
	for i := range cdf {
		sum += 1 / math.Pow(float64(i+1), alpha)
		cdf[i] = sum
	}
	for i := range cdf {
		cdf[i] /= sum
	}
	return &zipf{cdf: cdf, rng: rng}
}

func (z *zipf) next() uint64 {
	u := z.rng.Float64()
	return uint64(sort.SearchFloat64s(z.cdf, u))
}

func newRand(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// ZipfTrace returns requests for keys 0..keys-1 drawn from a Zipf
// distribution of exponent alpha (key 0 most popular). The same arguments
// always give the same trace.
func ZipfTrace(keys, requests int, alpha float64, seed uint64) *Trace {
	z := newZipf(keys, alpha, newRand(seed))
	t := &Trace{Name: fmt.Sprintf("zipf-%.1f", alpha), Keys: make([]uint64, requests)}
	for i := range t.Keys {
		t.Keys[i] = z.next()
	}
	return t
}

// scanBase is the first key of the scan region, disjoint from Zipf keys.
const scanBase = 1 << 40

// ScanTrace mixes a Zipf(alpha) stream over keys 0..keys-1 with long
// sequential scans: each scan reads scanLen consecutive keys starting at a
// random offset of a region of 10×keys keys disjoint from the Zipf ones, and
// scans make up about scanFrac of the requests. Scans model batch jobs and
// crawlers that flush recency-based caches. Deterministic in its arguments.
func ScanTrace(keys, requests int, alpha float64, scanLen int, scanFrac float64, seed uint64) *Trace {
	rng := newRand(seed)
	z := newZipf(keys, alpha, rng)
	t := &Trace{Name: "scan-mix", Keys: make([]uint64, 0, requests)}
	// Start a scan with probability pStart per Zipf request so that scans
	// take scanFrac of all requests on average.
	pStart := 0.0
	if scanLen > 0 && scanFrac > 0 && scanFrac < 1 {
		pStart = scanFrac / ((1 - scanFrac) * float64(scanLen))
	}
	region := uint64(10 * keys)
	for len(t.Keys) < requests {
		if rng.Float64() < pStart {
			start := rng.Uint64N(region)
			for j := 0; j < scanLen && len(t.Keys) < requests; j++ {
				t.Keys = append(t.Keys, scanBase+(start+uint64(j))%region)
			}
			continue
		}
		t.Keys = append(t.Keys, z.next())
	}
	return t
}

// DefaultMaxRequests bounds LoadTrace when its limit is not positive.
const DefaultMaxRequests = 50_000_000

const maxTraceLine = 4096

// LoadTrace reads a text trace: one request per line, "key" or "key size",
// fields separated by blanks; size is a non-negative byte count (1 when
// absent). Blank lines and lines starting with '#' are skipped. Keys are
// arbitrary strings up to 4 KiB per line, interned to dense ids in order of
// first appearance. name labels the trace and its errors. At most
// maxRequests requests are accepted (DefaultMaxRequests when <= 0); more is
// ErrTraceTooLong, a bad line ErrTraceFormat.
func LoadTrace(r io.Reader, name string, maxRequests int) (*Trace, error) {
	if maxRequests <= 0 {
		maxRequests = DefaultMaxRequests
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 512), maxTraceLine)
	t := &Trace{Name: name}
	ids := make(map[string]uint64)
	var sizes []int64
	line := 0
	for sc.Scan() {
		line++
		s := strings.TrimSpace(sc.Text())
		if s == "" || s[0] == '#' {
			continue
		}
		f := strings.Fields(s)
		if len(f) > 2 {
			return nil, fmt.Errorf("%w: %s:%d: %d fields, want key [size]", ErrTraceFormat, name, line, len(f))
		}
		size := int64(1)
		if len(f) == 2 {
			v, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil || v < 0 {
				return nil, fmt.Errorf("%w: %s:%d: size %q is not a non-negative integer", ErrTraceFormat, name, line, f[1])
			}
			size = v
			if sizes == nil {
				sizes = make([]int64, len(t.Keys), cap(t.Keys))
				for i := range sizes {
					sizes[i] = 1
				}
			}
		}
		if len(t.Keys) >= maxRequests {
			return nil, fmt.Errorf("%w: %s:%d: more than %d requests", ErrTraceTooLong, name, line, maxRequests)
		}
		id, ok := ids[f[0]]
		if !ok {
			id = uint64(len(ids))
			ids[f[0]] = id
		}
		t.Keys = append(t.Keys, id)
		if sizes != nil {
			sizes = append(sizes, size)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %s:%d: %w", ErrTraceFormat, name, line+1, err)
	}
	t.Sizes = sizes
	return t, nil
}

// LoadTraceFile opens path and calls LoadTrace with the file name as the
// trace name.
func LoadTraceFile(path string, maxRequests int) (*Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return LoadTrace(f, path, maxRequests)
}
