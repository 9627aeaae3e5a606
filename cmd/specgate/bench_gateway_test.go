package main

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestParseWrk(t *testing.T) {
	r, err := parseWrk("Running 1s test\n  2 threads\nRESULT 1000 2000000 3 250.500 200.000 400.000 900.250\nRequests/sec: 500\n")
	if err != nil {
		t.Fatal(err)
	}
	if r.requests != 1000 || r.durationS != 2 || r.errors != 3 || r.mean != 250.5 || r.p50 != 200 || r.p90 != 400 || r.p99 != 900.25 || r.rps() != 500 {
		t.Errorf("parsed %+v", r)
	}
	for _, bad := range []string{"", "RESULT 1 2 3", "RESULT x 1 0 1 1 1 1", "RESULT 1 0 0 1 1 1 1"} {
		if _, err := parseWrk(bad); !errors.Is(err, errBadWrk) {
			t.Errorf("%q: err = %v, want errBadWrk", bad, err)
		}
	}
}

// TestBenchGatewayRuns drives the whole command briefly (needs wrk).
func TestBenchGatewayRuns(t *testing.T) {
	if _, err := exec.LookPath("wrk"); err != nil {
		t.Skip("wrk not installed (apt-get install wrk)")
	}
	start := time.Now()
	out, err := captureStdout(t, func() error {
		return runBenchGateway([]string{"--rates", "200", "--duration", "1s", "--warmup", "0s"})
	})
	if err != nil {
		t.Fatalf("bench-gateway: %v\n%s", err, out)
	}
	for _, want := range []string{"| 200 rps | 2 | direct |", "| 200 rps | 2 | gateway |", "| c=1 | 1 | gateway |", "mean overhead"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	t.Logf("%v\n%s", time.Since(start), out)
}
