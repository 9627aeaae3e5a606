package engine

import (
	"math"
	"math/rand/v2"
	"testing"
)

func nearRel(a, b float64) bool { return math.Abs(a-b) <= 1e-9*max(1, math.Abs(b)) }

func TestStepCostSpikes(t *testing.T) {
	var c stepCost
	for range 5 {
		c.observe(1, 1e-3)
	}
	for _, x := range []float64{2e-3, 2e-3, 10e-3, 2e-3, 2.2e-3} { // one spike of 5x
		c.observe(8, x)
	}
	if got := c.at(8); !nearRel(got, 2e-3) {
		t.Fatalf("at(8) = %g after one spike in five timings, want the median 2e-3", got)
	}
	// a spike of the one-token step moves nothing either
	c.observe(1, 8e-3)
	if got := c.at(8); !nearRel(got, 2e-3) {
		t.Fatalf("at(8) = %g after a one-token spike, want 2e-3", got)
	}
}

func TestStepCostLoadScales(t *testing.T) {
	var c stepCost
	for range 5 {
		c.observe(1, 1e-3)
		c.observe(8, 2e-3)
	}
	// the machine gets 3x slower: only one-token steps are timed since
	for range 5 {
		c.observe(1, 3e-3)
	}
	if got := c.at(8); !nearRel(got, 6e-3) {
		t.Fatalf("at(8) = %g, want 3 x 2e-3 (the ratio holds, the base moved)", got)
	}
}

func TestStepCostSmallBucketTimedHigh(t *testing.T) {
	var c stepCost
	for range 5 {
		c.observe(1, 1e-3)
		c.observe(4, 1.4e-3)
	}
	c.observe(3, 5e-3) // timed once, in a spike: never granted (and timed) again
	if got := c.at(3); got > c.at(4) {
		t.Fatalf("at(3) = %g > at(4) = %g", got, c.at(4))
	}
	// beyond the largest bucket: 1.4 ms plus the minimum slope (5% of a
	// one-token step per token); the spike must not lift it
	if got := c.at(8); !nearRel(got, 1.6e-3) {
		t.Fatalf("at(8) = %g, want 1.6e-3", got)
	}
}

func TestStepCostMonotoneAndUnscaledBeforeBase(t *testing.T) {
	var c stepCost
	c.observe(70, 9e-3) // a prefill before any one-token step: nothing to scale it by
	if c.known() {
		t.Fatal("known() before a one-token step")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		T := 1 + rng.IntN(80)
		c.observe(T, 1e-3*(0.5+0.1*float64(T))*(0.5+3*rng.Float64()*rng.Float64()))
	}
	prev := 0.0
	for T := 1; T <= 200; T++ {
		v := c.at(T)
		if v < prev || !(v > 0) {
			t.Fatalf("at(%d) = %g after at(%d) = %g", T, v, T-1, prev)
		}
		prev = v
	}
}
