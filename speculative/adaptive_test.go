package speculative

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/specgate/specgate/engine"
)

func chainNodes(d int) int { return d }

func TestControllerPlan(t *testing.T) {
	// always accepted: the estimate rises and the deepest chain wins at low verify cost.
	c := newController(6)
	for range 50 {
		c.update(6, 6)
	}
	if d := c.plan(6, chainNodes, linearCosts(0.05, 0.1), 1); d != 6 {
		t.Errorf("full acceptance, cheap verify: depth %d, want 6", d)
	}
	if d := c.plan(3, chainNodes, linearCosts(0.05, 0.1), 1); d != 3 {
		t.Errorf("limit 3: depth %d", d)
	}
	// under heavy load a batched plain step is cheap: speculation at verify
	// cost 1 per token cannot pay even at full acceptance.
	if d := c.plan(6, chainNodes, linearCosts(1, 0.2), 32); d != 0 {
		t.Errorf("load 32, verify cost 1: depth %d, want 0 (plain)", d)
	}
	// always rejected: plain decoding, probing with depth 1 after 8, 16, 32
	// further plain steps (exponential back-off).
	r := newController(6)
	for range 50 {
		r.update(1, 0)
	}
	var probes []int
	for i := range 60 {
		if r.plan(6, chainNodes, linearCosts(0.3, 0.2), 1) != 0 {
			probes = append(probes, i)
		}
	}
	if got, want := fmt.Sprint(probes), fmt.Sprint([]int{probeEvery - 1, 3*probeEvery - 1, 7*probeEvery - 1}); got != want {
		t.Errorf("rejecting draft: probes at steps %s, want %s", got, want)
	}
	// when even a perfect draft cannot pay (CPU: verify cost 1), never probe.
	for i := range 200 {
		if d := r.plan(6, chainNodes, linearCosts(1, 0.24), 1); d != 0 {
			t.Fatalf("verify cost 1: step %d speculates at depth %d", i, d)
		}
	}
	// the estimate tracks a changed acceptance rate.
	for range 40 {
		r.update(6, 6)
	}
	if d := r.plan(6, chainNodes, linearCosts(0.05, 0.1), 1); d < 4 {
		t.Errorf("after recovery: depth %d, want >= 4", d)
	}
}

// TestAdaptiveEndToEnd: with a draft identical to the target the adaptive
// speculator speculates deeply; with an unrelated draft under greedy
// decoding it falls back to plain steps most of the time (the draft is
// declared cheap: DraftCost 0.05; at its true cost, 1.05, nothing pays); both outputs
// equal plain greedy decoding, and the same request twice gives the same
// steps (determinism).
func TestAdaptiveEndToEnd(t *testing.T) {
	cfg := tinyConfig()
	o := engine.LoadOptions{KVTokens: 512, BlockSize: 4, Threads: 1, DisablePrefixCache: true}
	target := engine.NewRandomModel(cfg, 5, o)
	same := engine.NewRandomModel(cfg, 5, o)
	other := engine.NewRandomModel(cfg, 77, o)
	e := engine.New(target, engine.Options{})
	defer e.Close()
	prompt := []int32{0, 4, 8, 1}
	want, _, err := generate(e, engine.GenerateRequest{Prompt: prompt, MaxTokens: 48, NoSpeculation: true})
	if err != nil {
		t.Fatal(err)
	}
	run := func(d *engine.Model) ([]int32, engine.SpecStats) {
		sp, err := NewDraft(target, d, Config{Method: MethodChain, K: 6, Adaptive: true, VerifyCost: 0.1, DraftCost: 0.05})
		if err != nil {
			t.Fatal(err)
		}
		got, res, err := generate(e, engine.GenerateRequest{Prompt: prompt, MaxTokens: 48, Speculator: sp})
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("adaptive output %v, plain %v", got, want)
		}
		return got, *res.Spec
	}
	_, good := run(same)
	if tau := 47 / float64(good.Steps); good.Accepted != good.Proposed || tau < 4 {
		t.Errorf("identical draft: %+v, tau %.2f: want all accepted and tau >= 4", good, tau)
	}
	_, bad := run(other)
	if bad.Proposed > bad.Steps/2 {
		t.Errorf("unrelated draft: %+v: want mostly plain steps (proposed <= steps/2)", bad)
	}
	_, again := run(other)
	if !reflect.DeepEqual(again, bad) {
		t.Errorf("same request twice: %+v then %+v", bad, again)
	}
	t.Logf("identical draft %+v; unrelated draft %+v", good, bad)
}

func TestCostModel(t *testing.T) {
	lin := linearCosts(0.3, 0.2)
	if got := lin.forward(1); got != 1 {
		t.Errorf("linear forward(1) = %v, want 1", got)
	}
	if got := lin.forward(5); got < 2.2-1e-9 || got > 2.2+1e-9 {
		t.Errorf("linear forward(5) = %v, want 2.2", got)
	}
	tab := costModel{fwd: []float64{1, 1.6, 2.5}, verify: 0.5, draft: 0.2}
	if got := tab.forward(2); got != 1.6 {
		t.Errorf("table forward(2) = %v, want 1.6", got)
	}
	if got := tab.forward(5); got < 3.5-1e-9 || got > 3.5+1e-9 {
		t.Errorf("table forward(5) = %v, want 2.5 + 2*0.5", got)
	}
	// a verify cost of 0.6 per extra token and a 0.2 draft: depth 1 at 60%
	// acceptance yields 1.6 tokens for 1.8 forwards: plain wins.
	c := newController(4)
	for range 50 {
		c.update(1, 0)
		c.update(1, 1)
	}
	if d := c.plan(4, chainNodes, costModel{fwd: []float64{1, 1.6, 2.6}, verify: 0.6, draft: 0.2}, 1); d != 0 {
		t.Errorf("costly verify: depth %d, want 0", d)
	}
	if d := c.plan(4, chainNodes, costModel{fwd: []float64{1, 1.1, 1.2}, verify: 0.1, draft: 0.05}, 1); d == 0 {
		t.Errorf("cheap verify: plain, want speculation")
	}
	// at the ~55% acceptance estimate depth 1 yields ~1.55 tokens for 1.5
	// forwards (gain ~1.03): speculation without a margin, plain with the
	// measured margin.
	lean := costModel{fwd: []float64{1, 1.3, 1.9}, verify: 0.45, draft: 0.2}
	if d := c.plan(1, chainNodes, lean, 1); d != 1 {
		t.Errorf("gain ~1.03, no margin: depth %d, want 1", d)
	}
	lean.margin = measuredGain
	if d := c.plan(1, chainNodes, lean, 1); d != 0 {
		t.Errorf("gain ~1.03, margin %v: depth %d, want 0", measuredGain, d)
	}
}

func TestMeasureCosts(t *testing.T) {
	cfg := tinyConfig()
	o := engine.LoadOptions{KVTokens: 512, BlockSize: 4, Threads: 1, DisablePrefixCache: true}
	target := engine.NewRandomModel(cfg, 5, o)
	draft := engine.NewRandomModel(cfg, 6, o)
	cm, err := measureCosts(target, draft, 6, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(cm.fwd) != 6 || cm.fwd[0] != 1 || !(cm.draft > 0) || !(cm.verify >= 0) {
		t.Fatalf("cost model %+v: want 6 entries, fwd[0] = 1, draft > 0, verify >= 0", cm)
	}
	for i := 1; i < len(cm.fwd); i++ {
		if cm.fwd[i] < cm.fwd[i-1] {
			t.Errorf("fwd %v not non-decreasing at %d", cm.fwd, i)
		}
	}
	if u, v := target.KV().UsedBlocks(), draft.KV().UsedBlocks(); u != 0 || v != 0 {
		t.Errorf("KV leak: target %d, draft %d blocks in use", u, v)
	}
}
