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
	// a size timed fewer than denseAt times is priced at most at the
	// interpolation of its dense neighbours: 1 + 2/3 x 0.4 ms
	want3 := 1e-3 * (1 + 2.0/3*0.4)
	if got := c.at(3); !nearRel(got, want3) {
		t.Fatalf("at(3) = %g, want %g", got, want3)
	}
	// beyond the largest bucket: its last slope; the spike must not lift it
	if got, want := c.at(8), 1.4e-3+4*(1.4e-3-want3); !nearRel(got, want) {
		t.Fatalf("at(8) = %g, want %g", got, want)
	}
	// timed often enough at that price, the size keeps it (a real cost)
	for range 3 {
		c.observe(3, 5e-3)
	}
	if got := c.at(3); !nearRel(got, 1.4e-3) { // the envelope from above: at most at(4)
		t.Fatalf("at(3) = %g after dense timings, want at(4) = 1.4e-3", got)
	}
}

// TestStepCostCalibrationDense: a calibration timing counts as dense, so a
// first real timing of that size far above it (a CUDA graph captured on
// first use) does not move the price, while sizes between calibrated ones
// are held to their interpolation.
func TestStepCostCalibrationDense(t *testing.T) {
	var c stepCost
	c.observeCalibrated(1, 1e-3)
	c.observeCalibrated(4, 2e-3)
	c.observeCalibrated(8, 3e-3)
	c.observe(8, 9e-3) // first real step of 8 tokens: eager run plus graph capture
	if got := c.at(8); !nearRel(got, 3e-3) {
		t.Fatalf("at(8) = %g, want the calibrated 3e-3", got)
	}
	c.observe(6, 8e-3) // first step of 6 tokens, never calibrated
	if got := c.at(6); !nearRel(got, 2.5e-3) {
		t.Fatalf("at(6) = %g, want the interpolation 2.5e-3", got)
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

// A size timed fewer than denseAt times above the largest dense size is
// capped at the extrapolation of the last two dense sizes (at least
// sparseSlope per token), not priced by its own timing: one spike at T=40
// priced at(64) at 50 ms before (and the slope beyond it at 0.075 per
// token), so 64-token steps were never granted and never timed again.
// Expected values computed by hand in the comments.
func TestStepCostSparseAboveDenseCapped(t *testing.T) {
	near := func(name string, got, want float64) {
		t.Helper()
		t.Logf("%s = %.4f ms (want %.4f)", name, got*1e3, want*1e3)
		if math.Abs(got-want) > 1e-9 {
			t.Errorf("%s = %.6f ms, want %.6f", name, got*1e3, want*1e3)
		}
	}
	dense := func(steps ...[2]float64) *stepCost {
		var c stepCost
		for _, s := range steps {
			for range denseAt {
				c.observe(int(s[0]), s[1])
			}
		}
		return &c
	}
	// base 10 ms; ratios 1.2 at 8 and 1.4 at 16: dense slope 0.025 per
	// token, below sparseSlope, so 0.05. One spike: 50 ms at T=40 (bucket
	// 64, ratio 5). Cap at 64: 1.4 + 0.05*(64-16) = 3.8.
	c := dense([2]float64{1, 10e-3}, [2]float64{8, 12e-3}, [2]float64{16, 14e-3})
	c.observe(40, 50e-3)
	near("at(64)", c.at(64), 38e-3)         // before: 50 ms
	near("at(40)", c.at(40), 26e-3)         // 1.4 + (24/48)*(3.8-1.4) = 2.6; before: 32 ms
	near("at(128)", c.at(128), 70e-3)       // 3.8 + 0.05*(128-64) = 7.0; before: 98 ms
	near("at(16)", c.at(16), 14e-3)         // dense sizes unchanged
	near("at(12)", c.at(12), 13e-3)         // between dense sizes: 1.3
	near("at(1)", c.at(1), 10e-3)           // base unchanged
	near("at(2)", c.at(2), 10e-3*(1+0.2/7)) // 1 + (1/7)*(1.2-1)

	// Once the size has denseAt timings it is trusted: 50 ms.
	c.observe(40, 50e-3)
	c.observe(40, 50e-3)
	near("at(64), dense", c.at(64), 50e-3)

	// A steeper dense slope: ratios 1.2 at 8 and 2.0 at 16 (0.1 per
	// token): the cap at 64 is 2.0 + 0.1*48 = 6.8, above the timing's 5,
	// so the timing stands.
	c = dense([2]float64{1, 10e-3}, [2]float64{8, 12e-3}, [2]float64{16, 20e-3})
	c.observe(40, 50e-3)
	near("at(64), steep", c.at(64), 50e-3)

	// Only the one-token size dense: a sparse 4-token timing of 30 ms is
	// capped at 1 + 0.05*(4-1) = 1.15 ratio.
	c = dense([2]float64{1, 10e-3})
	c.observe(4, 30e-3)
	near("at(4), only base dense", c.at(4), 11.5e-3) // before: 30 ms
}
