package main

import (
	"testing"
	"time"

	"github.com/specgate/specgate/engine"
)

// fixedStepCosts makes the engines built by serve and bench workload in
// test t price target steps by a fixed curve (one token 0.6 ms, each more
// token 13% of it: within the CPU verification bars of issue #10) instead
// of timing them, so that tests asserting that speculation drafted do not
// fail when a loaded machine makes drafting look unprofitable.
func fixedStepCosts(t *testing.T) {
	t.Helper()
	old := testEngineOptions
	testEngineOptions = func(o *engine.Options) {
		o.StepCost = func(T int) time.Duration {
			return time.Duration(600*(1+0.13*float64(T-1))) * time.Microsecond
		}
		// a proposer's level at a tenth of a one-token step, so that a slow,
		// loaded machine does not make the budget stop drafting
		o.ProposeCost = func() time.Duration { return 60 * time.Microsecond }
	}
	t.Cleanup(func() { testEngineOptions = old })
}
