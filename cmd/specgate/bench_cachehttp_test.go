package main

import (
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/specgate/specgate/cache"
)

func TestParseXCache(t *testing.T) {
	x, err := parseXCache("RESULT 10 1000000 0 1 1 1 1\nXCACHE 7 2 1 0\n")
	if err != nil {
		t.Fatal(err)
	}
	if x != (xcacheCounts{7, 2, 1, 0}) || x.total() != 10 {
		t.Errorf("parsed %+v", x)
	}
	for _, bad := range []string{"", "XCACHE 1 2 3", "XCACHE 1 2 x 4", "XCACHE 1 -2 3 4"} {
		if _, err := parseXCache(bad); !errors.Is(err, errBadWrk) {
			t.Errorf("%q: err = %v, want errBadWrk", bad, err)
		}
	}
}

// TestCacheHTTPQuestions checks the generated workload itself: stored
// questions are distinct and differ in their exact-tier key, and every
// paraphrase misses the exact tier but passes the cache's guard against its
// own stored question, while the guard rejects it against a stored question
// that differs in the object or the language.
func TestCacheHTTPQuestions(t *testing.T) {
	seen := map[string]bool{}
	idx := chPick(3000, 7)
	for _, i := range idx {
		q, p, parts := chQuestion(i)
		nq, np := cache.Normalize(q, false), cache.Normalize(p, false)
		if seen[nq] {
			t.Fatalf("duplicate stored question %q", q)
		}
		seen[nq] = true
		if nq == np {
			t.Errorf("paraphrase %q normalizes like %q (would be an exact hit)", p, q)
		}
		if why := cache.Guard(np, nq); why != "" {
			t.Errorf("guard rejects paraphrase %q of %q: %s", p, q, why)
		}
		for _, part := range parts {
			if !strings.Contains(q, part) || !strings.Contains(strings.ToLower(p), strings.ToLower(part)) {
				t.Errorf("%q / %q do not both contain %q", q, p, part)
			}
		}
	}
	// Neighbours that differ in the language (the last index digit) or the
	// object are other questions: the guard must not let them through.
	q0, _, _ := chQuestion(0)
	_, pLang, _ := chQuestion(1)
	_, pObj, _ := chQuestion(30) // the next object: cache.BenchQuestion cycles 30 languages first
	for _, p := range []string{pLang, pObj} {
		if why := cache.Guard(cache.Normalize(p, false), cache.Normalize(q0, false)); why == "" {
			t.Errorf("guard accepts %q for stored %q", p, q0)
		}
	}
}

var cacheHTTPRowRE = regexp.MustCompile(`(?m)^\| 300 \| [^|]+ \| (exact|semantic) \| (\d+)/(\d+) (HIT-EXACT|HIT-SEMANTIC), (\d+) intended entry \| 4 \| (\d+) \| [^|]+\| [^|]+\| [^|]+\| [^|]+\| [^|]+\| (\d+) \| ([0-9.]+) `)

// TestBenchCacheHTTPRuns drives the whole command at a tiny size (needs wrk
// and the shipped model): 300 entries, 2 s per tier.
func TestBenchCacheHTTPRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the gateway and wrk (seconds)")
	}
	if _, err := exec.LookPath("wrk"); err != nil {
		t.Skip("wrk not installed (apt-get install wrk)")
	}
	model := "../../models/specgate-target"
	if _, err := os.Stat(model + "/config.json"); err != nil {
		t.Skip("shipped model not present")
	}
	out, err := captureStdout(t, func() error {
		return runBenchCacheHTTP([]string{"-entries", "300", "-queries", "300", "-duration", "2s", "-warmup", "0s",
			"-conns", "4", "-threads", "2", "-sample", "60", "-model", model})
	})
	if err != nil {
		t.Fatalf("bench-cache-http: %v\n%s", err, out)
	}
	ms := cacheHTTPRowRE.FindAllStringSubmatch(out, -1)
	if len(ms) != 2 || ms[0][1] != "exact" || ms[1][1] != "semantic" {
		t.Fatalf("want an exact and a semantic row for 300 entries:\n%s", out)
	}
	for _, m := range ms {
		hits, _ := strconv.Atoi(m[2])
		sent, _ := strconv.Atoi(m[3])
		intended, _ := strconv.Atoi(m[5])
		rps, _ := strconv.Atoi(m[6])
		errs, _ := strconv.Atoi(m[7])
		frac, _ := strconv.ParseFloat(m[8], 64)
		if sent != 60 || rps <= 0 || errs != 0 {
			t.Errorf("%s row: sent %d, %d requests/s, %d errors\n%s", m[1], sent, rps, errs, out)
		}
		// Exact lookups must all hit their own entry; paraphrases nearly all.
		want := 1.0
		if m[1] == "semantic" {
			want = 0.95
		}
		if float64(hits) < want*float64(sent) || float64(intended) < want*float64(sent) || frac < want {
			t.Errorf("%s row: %d/%d hits, %d intended, wrk hit fraction %.4f; want ≥ %.2f\n%s", m[1], hits, sent, intended, frac, want, out)
		}
	}
}

// captureStdout runs f with os.Stdout redirected and returns what it printed.
func captureStdout(t *testing.T, f func() error) (string, error) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	done := make(chan []byte)
	go func() {
		var buf []byte
		b := make([]byte, 4096)
		for {
			n, err := r.Read(b)
			buf = append(buf, b[:n]...)
			if err != nil {
				done <- buf
				return
			}
		}
	}()
	err = f()
	os.Stdout = old
	w.Close()
	return string(<-done), err
}
