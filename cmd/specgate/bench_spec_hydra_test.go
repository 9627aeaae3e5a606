package main

import (
	"strings"
	"testing"
)

// TestBenchSpecHydraRows: `bench spec --hydra DIR` adds rows "hydra n=N" /
// "hydra adaptive" for a second heads directory (the shipped Hydra heads)
// beside the medusa rows of the same invocation; greedy rows are checked
// equal to plain by the benchmark itself (an error otherwise).
func TestBenchSpecHydraRows(t *testing.T) {
	out, err := captureStdout(t, func() error {
		return runBenchSpec([]string{"--target", "../../models/specgate-target", "--draft", "../../models/specgate-draft",
			"--medusa", "../../models/specgate-target-medusa", "--hydra", "../../models/specgate-target-hydra", "--modes", "medusa n=1,hydra n=1,hydra n=2",
			"--prompts", "2", "--tokens", "16", "--runs", "1", "--warm-runs", "0"})
	})
	if err != nil {
		t.Fatalf("bench spec: %v\n%s", err, out)
	}
	for _, row := range []string{"| medusa n=1 |", "| hydra n=1 |", "| hydra n=2 |"} {
		if !strings.Contains(out, row) {
			t.Errorf("no row %q in\n%s", row, out)
		}
	}
}
