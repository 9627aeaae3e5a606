package policy

import (
	"bytes"
	"errors"
	"io/fs"
	"math"
	"slices"
	"strings"
	"testing"
)

func TestZipfTrace(t *testing.T) {
	a := ZipfTrace(100, 200000, 1.0, 42)
	b := ZipfTrace(100, 200000, 1.0, 42)
	if !slices.Equal(a.Keys, b.Keys) {
		t.Fatal("same seed, different traces")
	}
	if slices.Equal(a.Keys, ZipfTrace(100, 200000, 1.0, 43).Keys) {
		t.Fatal("different seeds, same trace")
	}
	// P(rank r) = (1/(r+1)) / H_100, H_100 = 5.18738; 200k samples give a
	// standard error below 0.001 for these ranks.
	h := 0.0
	for i := 1; i <= 100; i++ {
		h += 1 / float64(i)
	}
	count := map[uint64]int{}
	for _, k := range a.Keys {
		if k >= 100 {
			t.Fatalf("key %d outside 0..99", k)
		}
		count[k]++
	}
	for _, r := range []uint64{0, 1, 9, 99} {
		want := 1 / float64(r+1) / h
		got := float64(count[r]) / float64(len(a.Keys))
		if math.Abs(got-want) > 0.005 {
			t.Errorf("rank %d frequency %.4f, want %.4f", r, got, want)
		}
	}
	// α=0.8 is flatter: rank 0 gets 1/Σ(1/i^0.8).
	z := ZipfTrace(100, 200000, 0.8, 1)
	s := 0.0
	for i := 1; i <= 100; i++ {
		s += math.Pow(float64(i), -0.8)
	}
	n0 := 0
	for _, k := range z.Keys {
		if k == 0 {
			n0++
		}
	}
	if got, want := float64(n0)/200000, 1/s; math.Abs(got-want) > 0.005 {
		t.Errorf("alpha 0.8 rank 0 frequency %.4f, want %.4f", got, want)
	}
}

func TestScanTrace(t *testing.T) {
	tr := ScanTrace(1000, 300000, 1.0, 500, 0.3, 7)
	if tr.Len() != 300000 {
		t.Fatalf("len %d", tr.Len())
	}
	scans, runs := 0, 0
	for i, k := range tr.Keys {
		if k >= scanBase {
			scans++
			if i == 0 || tr.Keys[i-1] < scanBase {
				runs++
			} else if k != tr.Keys[i-1]+1 && k != scanBase { // consecutive (wrapping)
				if tr.Keys[i-1]-scanBase != 10*1000-1 {
					t.Fatalf("request %d: scan key %d does not follow %d", i, k, tr.Keys[i-1])
				}
			}
		} else if k >= 1000 {
			t.Fatalf("Zipf key %d outside 0..999", k)
		}
	}
	if f := float64(scans) / float64(tr.Len()); math.Abs(f-0.3) > 0.05 {
		t.Fatalf("scan share %.3f, want about 0.3", f)
	}
	if avg := float64(scans) / float64(runs); avg < 400 {
		t.Fatalf("average scan run %.0f, want about 500", avg)
	}
}

func TestLoadTrace(t *testing.T) {
	in := "# a comment\nalpha\nbeta 100\n\n  alpha  \ngamma 0\n"
	tr, err := LoadTrace(strings.NewReader(in), "t.txt", 0)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(tr.Keys, []uint64{0, 1, 0, 2}) || !slices.Equal(tr.Sizes, []int64{1, 100, 1, 0}) {
		t.Fatalf("keys %v sizes %v", tr.Keys, tr.Sizes)
	}
	if tr.Distinct() != 3 || tr.Name != "t.txt" {
		t.Fatalf("distinct %d name %q", tr.Distinct(), tr.Name)
	}
	tr, err = LoadTrace(strings.NewReader("x\ny\nx\n"), "plain", 0)
	if err != nil || tr.Sizes != nil || tr.Size(1) != 1 {
		t.Fatalf("plain trace: %v %v", err, tr)
	}

	bad := []struct {
		in   string
		want error
		msg  string
	}{
		{"a b c\n", ErrTraceFormat, "bad.txt:1"},
		{"ok\nk -3\n", ErrTraceFormat, "bad.txt:2"},
		{"k 1e3\n", ErrTraceFormat, "size"},
		{strings.Repeat("x", 5000) + "\n", ErrTraceFormat, "bad.txt:1"},
		{"a\nb\nc\nd\n", ErrTraceTooLong, "more than 3"},
	}
	for _, b := range bad {
		_, err := LoadTrace(strings.NewReader(b.in), "bad.txt", 3)
		if !errors.Is(err, b.want) || !strings.Contains(err.Error(), b.msg) {
			t.Errorf("%.20q: error %v, want %v mentioning %q", b.in, err, b.want, b.msg)
		}
	}
	tr, err = LoadTraceFile("testdata/tiny.trace", 0)
	if err != nil || tr.Len() != 30 || tr.Distinct() != 9 || tr.Size(1) != 300 || tr.Size(0) != 1 {
		t.Fatalf("tiny.trace: %v, %d requests, %d distinct", err, tr.Len(), tr.Distinct())
	}
	if _, err := LoadTraceFile("testdata/does-not-exist", 0); err == nil {
		t.Error("missing file loaded")
	}
}

func TestSimulate(t *testing.T) {
	// LRU with room for 2 on a b a c b a: miss miss hit miss(evict b) miss(evict a) miss → 1 hit.
	tr := &Trace{Name: "hand", Keys: []uint64{1, 2, 1, 3, 2, 1}}
	r := Simulate(NewLRU[uint64](Capacity{MaxEntries: 2}), tr)
	if r.Hits != 1 || r.Requests != 6 || math.Abs(r.HitRatio()-1.0/6) > 1e-12 {
		t.Fatalf("result %+v", r)
	}
	if (Result{}).HitRatio() != 0 {
		t.Fatal("empty ratio")
	}
	// Byte capacity uses the trace's sizes: key 2 (size 5) never fits in 4.
	tr = &Trace{Keys: []uint64{1, 2, 1, 2}, Sizes: []int64{1, 5, 1, 5}}
	if r := Simulate(NewLRU[uint64](Capacity{MaxBytes: 4}), tr); r.Hits != 1 || r.Bytes != 12 || r.HitBytes != 1 || r.ByteHitRatio() != 1.0/12 {
		t.Fatalf("sized trace: %+v, want 1 hit, 12 bytes, 1 hit byte", r)
	}
	if (Result{}).ByteHitRatio() != 0 {
		t.Fatal("empty byte ratio")
	}
}

func TestWithSizes(t *testing.T) {
	base := ZipfTrace(1000, 20000, 1.0, 3)
	a, b := WithSizes(base, 1, 1024, 9), WithSizes(base, 1, 1024, 9)
	if !slices.Equal(a.Sizes, b.Sizes) || a.Name != "zipf-1.0-sized" {
		t.Fatal("not deterministic")
	}
	size := map[uint64]int64{}
	small, large := 0, 0
	for i, k := range a.Keys {
		s := a.Sizes[i]
		if s < 1 || s > 1024 {
			t.Fatalf("size %d outside [1, 1024]", s)
		}
		if prev, ok := size[k]; ok && prev != s {
			t.Fatalf("key %d has sizes %d and %d", k, prev, s)
		}
		size[k] = s
	}
	for _, s := range size { // log-uniform: about half the keys below 32 bytes
		if s < 32 {
			small++
		} else {
			large++
		}
	}
	if f := float64(small) / float64(small+large); f < 0.4 || f > 0.6 {
		t.Fatalf("%.2f of keys below 32 bytes, want about 0.5", f)
	}
	rows, err := RunSizedTable([]*Trace{a}, []float64{0.05}, TableOrder, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range TableOrder {
		if r := rows[0].Ratios[n]; r <= 0 || r >= 1 {
			t.Errorf("%s: hit ratio %f", n, r)
		}
	}
}

func TestRunBench(t *testing.T) {
	var out bytes.Buffer
	err := RunBench(&out, []string{"-keys", "2000", "-requests", "20000", "-sizes", "0.01,0.1", "-scan-len", "500"})
	if err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{"| trace |", "| zipf-0.8 |", "| zipf-1.0 |", "| scan-mix |", "belady |", "wtinylfu"} {
		if !strings.Contains(s, want) {
			t.Fatalf("output lacks %q:\n%s", want, s)
		}
	}
	if n := strings.Count(s, "\n| zipf") + strings.Count(s, "\n| scan"); n != 8 {
		t.Fatalf("%d table rows, want 8 (3 traces × 2 sizes, 1 sized trace × 2 sizes):\n%s", n, s)
	}
	if n := strings.Count(s, "\n| zipf-1.0-sized"); n != 2 || !strings.Contains(s, "cache (bytes)") {
		t.Fatalf("sized table missing:\n%s", s)
	}
	out.Reset()
	if err := RunBench(&out, []string{"-keys", "500", "-requests", "5000", "-sizes", "0.1", "-no-sized", "-policies", "lru,gdsf"}); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); strings.Contains(s, "sized") || !strings.Contains(s, "| lru | gdsf | belady |") {
		t.Fatalf("-no-sized -policies lru,gdsf:\n%s", s)
	}
	// A trace file becomes one more row per size. Each of tiny.trace's 5
	// rounds is: home, about, home, item-1, item-2, once-<round>. With room
	// for 4 keys (-sizes 0.5 of 9 distinct) Belady keeps the 4 loop keys and
	// never admits the one-offs: round 1 hits only the second home, rounds
	// 2-5 hit all 5 loop requests: 1 + 4*5 = 21 of 30 = 70.00%.
	out.Reset()
	if err := RunBench(&out, []string{"-keys", "100", "-requests", "1000", "-sizes", "0.5", "-no-sized", "-trace", "testdata/tiny.trace"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "| testdata/tiny.trace | 9 | 4 | 50 |") || !strings.Contains(out.String(), " 70.00 |\n") {
		t.Fatalf("trace row missing or Belady not 21/30 = 70.00%%:\n%s", out.String())
	}
	if err := RunBench(&out, []string{"-trace", "testdata/missing"}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing trace file: %v", err)
	}
	for _, args := range [][]string{{"-sizes", "0"}, {"-sizes", "x"}, {"-policies", "arc"}, {"-keys", "0"}, {"-nope"}} {
		if err := RunBench(&out, args); !errors.Is(err, ErrUsage) {
			t.Errorf("%v: error %v, want ErrUsage", args, err)
		}
	}
}

func TestRunTableBeladyIsUpperBound(t *testing.T) {
	traces := []*Trace{ZipfTrace(5000, 50000, 0.8, 1), ScanTrace(5000, 50000, 1.0, 1000, 0.3, 2)}
	rows, err := RunTable(traces, []float64{0.005, 0.05}, TableOrder, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		for _, n := range TableOrder {
			if r.Ratios[n] > r.Ratios["belady"] || r.Ratios[n] <= 0 {
				t.Errorf("%s cap %d: %s %.4f vs belady %.4f", r.Trace, r.Capacity, n, r.Ratios[n], r.Ratios["belady"])
			}
		}
	}
}
