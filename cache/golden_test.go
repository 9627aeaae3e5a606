package cache_test

import (
	"bufio"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/specgate/specgate/cache"
)

// goldenLines returns the tab-separated fields of each non-comment line of
// a golden file.
func goldenLines(t *testing.T, path string) [][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out [][]string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if line := sc.Text(); line != "" && line[0] != '#' {
			out = append(out, strings.Split(line, "\t"))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func unquote(t *testing.T, s string) string {
	t.Helper()
	u, err := strconv.Unquote(s)
	if err != nil {
		t.Fatalf("golden text %s: %v", s, err)
	}
	return u
}

// TestLexicalGolden pins the lexical embedding bit for bit to the vectors
// of the map-based embedding before ee1e51b (testdata/golden/lexical.txt,
// written at d9e2c15 by testdata/golden/gen): ASCII, invalid UTF-8, long
// words, CJK and other scripts, long texts, three dimensions and weights.
func TestLexicalGolden(t *testing.T) {
	lines := goldenLines(t, "testdata/golden/lexical.txt")
	if len(lines) < 50 {
		t.Fatalf("%d golden vectors", len(lines))
	}
	for _, f := range lines {
		if len(f) != 4 {
			t.Fatalf("golden line with %d fields", len(f))
		}
		dim, err := strconv.Atoi(f[0])
		if err != nil {
			t.Fatal(err)
		}
		var w [3]float32
		for i, s := range strings.Fields(f[1]) {
			x, err := strconv.ParseFloat(s, 32)
			if err != nil {
				t.Fatal(err)
			}
			w[i] = float32(x)
		}
		text := unquote(t, f[2])
		bits := strings.Fields(f[3])
		if len(bits) != dim {
			t.Fatalf("%q: %d golden values, dim %d", text, len(bits), dim)
		}
		e, err := cache.NewLexical(dim, cache.WithLexicalWeights(w[0], w[1], w[2]))
		if err != nil {
			t.Fatal(err)
		}
		vs, err := e.Embed(t.Context(), []string{text})
		if err != nil {
			t.Fatal(err)
		}
		for i, s := range bits {
			b, err := strconv.ParseUint(s, 16, 32)
			if err != nil {
				t.Fatal(err)
			}
			if got := math.Float32bits(vs[0][i]); got != uint32(b) {
				t.Errorf("dim %d weights %v %.40q: [%d] = %08x (%g), golden %08x (%g)", dim, w, text, i, got, vs[0][i], b, math.Float32frombits(uint32(b)))
				break
			}
		}
	}
}

// TestGuardGolden pins the guard's decisions to those of the guard before
// ee1e51b (testdata/golden/guard.txt, written at d9e2c15 by
// testdata/golden/gen): the eval pairs both ways, random pairs and their
// perturbations, long pairs, invalid UTF-8 and other scripts.
func TestGuardGolden(t *testing.T) {
	lines := goldenLines(t, "testdata/golden/guard.txt")
	if len(lines) < 3000 {
		t.Fatalf("%d golden pairs", len(lines))
	}
	for _, f := range lines {
		if len(f) != 3 {
			t.Fatalf("golden line with %d fields", len(f))
		}
		q, c, want := unquote(t, f[0]), unquote(t, f[1]), f[2]
		if want == "-" {
			want = ""
		}
		if got := cache.Guard(q, c); got != want {
			t.Errorf("Guard(%.60q, %.60q) = %q, golden %q", q, c, got, want)
		}
	}
}
