package main

import (
	"context"
	"testing"
)

// TestBenchWorkload runs every trace once against an in-process server
// with two items each: plain and drafted outputs must be equal (the
// command fails otherwise), and the drafted runs must have used their
// sources: near misses for paraphrases, the prediction for code edits.
func TestBenchWorkload(t *testing.T) {
	fixedStepCosts(t)
	base, stop, err := wlServer("../../models/specgate-target", "specgate-target", "cpu", 0, false)
	if err != nil {
		t.Skipf("shipped model: %v", err)
	}
	defer stop()
	f := false
	verbose = &f
	for _, tr := range wlTraces("specgate-target", 2) {
		res, err := wlRun(context.Background(), base, "", tr, 0)
		if err != nil {
			t.Fatalf("%s: %v", tr.name, err)
		}
		if res.mismatches != 0 || res.reqs < 2 || res.tokens == 0 {
			t.Fatalf("%s: %+v", tr.name, res)
		}
		t.Logf("%s: %+v", tr.name, res)
		switch tr.name {
		case "paraphrase":
			if res.nearMiss == 0 {
				t.Errorf("paraphrase: no near-miss draft")
			}
		case "code-edit":
			if res.bySource["prediction"].Accepted == 0 {
				t.Errorf("code-edit: no prediction token accepted")
			}
		}
	}
}
