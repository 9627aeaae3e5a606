package serving

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/cuda"
)

// fakeWarmer is a backend with a start-up warm-up that records its plans.
type fakeWarmer struct {
	engine.Backend
	plans []cuda.WarmupPlan
	err   error
}

func (f *fakeWarmer) Warmup(_ context.Context, p cuda.WarmupPlan) (cuda.WarmupStats, error) {
	f.plans = append(f.plans, p)
	if p.Log != nil {
		p.Log("cuda graph warm-up done", "captured", 3)
	}
	return cuda.WarmupStats{Captured: 3}, f.err
}

// TestGraphWarmupWiring: graph_warmup parses (default on), a backend with a
// warm-up gets the plan built from the model's settings (the engine's
// batch size, the model's context, trees for the target only) and its
// progress lines go to the log; graph_warmup: false skips it; the CPU
// backend has none (Load logs no warm-up), and a failed warm-up is logged,
// not fatal.
func TestGraphWarmupWiring(t *testing.T) {
	parse := func(src string) ModelConfig {
		t.Helper()
		var mc ModelConfig
		dec := yaml.NewDecoder(strings.NewReader(src))
		dec.KnownFields(true)
		if err := dec.Decode(&mc); err != nil {
			t.Fatalf("%q: %v", src, err)
		}
		return mc
	}
	on := parse("name: m\npath: t\nmax_batch: 12\n")
	off := parse("name: m\npath: t\ngraph_warmup: false\n")
	if on.GraphWarmup != nil || off.GraphWarmup == nil || *off.GraphWarmup {
		t.Fatalf("graph_warmup: default %v, false -> %v", on.GraphWarmup, off.GraphWarmup)
	}
	if explicit := parse("name: m\npath: t\ngraph_warmup: true\n"); explicit.GraphWarmup == nil || !*explicit.GraphWarmup {
		t.Fatalf("graph_warmup: true -> %v", explicit.GraphWarmup)
	}

	cfg := engine.Config{MaxPositions: 1024}
	p := warmupPlan(on, engine.Options{MaxBatch: 12}, cfg, true)
	if p.MaxBatch != 12 || p.MaxContext != 1024 || p.MaxTree != 0 {
		t.Fatalf("target plan %+v, want MaxBatch 12, MaxContext 1024, MaxTree 0 (all tree sizes)", p)
	}
	if d := warmupPlan(on, engine.Options{}, cfg, false); d.MaxBatch != 32 || d.MaxTree != -1 {
		t.Fatalf("draft plan %+v, want MaxBatch 32 (engine default), MaxTree -1 (no trees)", d)
	}

	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	f := &fakeWarmer{}
	if !warmGraphs(log, on, "target", f, p) || len(f.plans) != 1 {
		t.Fatalf("warm-up on: ran %d times, want 1", len(f.plans))
	}
	if got := f.plans[0]; got.MaxBatch != 12 || got.MaxContext != 1024 || got.Log == nil {
		t.Fatalf("plan handed to the backend %+v", got)
	}
	if s := buf.String(); !strings.Contains(s, "cuda graph warm-up done") || !strings.Contains(s, "model=m") || !strings.Contains(s, "role=target") {
		t.Fatalf("progress not logged with the model: %q", s)
	}
	if warmGraphs(log, off, "target", f, p) || len(f.plans) != 1 {
		t.Fatalf("graph_warmup: false still warmed up (%d calls)", len(f.plans))
	}
	buf.Reset()
	f.err = errors.New("out of memory")
	if !warmGraphs(log, on, "target", f, p) || !strings.Contains(buf.String(), "warm-up failed") || !strings.Contains(buf.String(), "out of memory") {
		t.Fatalf("failed warm-up not logged: %q", buf.String())
	}

	// the CPU backend: nothing to warm, and Load logs no warm-up
	mc := parse("name: m\npath: ../models/specgate-target\nbackend: cpu\nkv_blocks: 16\n")
	mc.ApplyDefaults()
	buf.Reset()
	m, err := Load(mc, Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if warmGraphs(log, mc, "target", m.Weights.Backend(), p) {
		t.Fatal("warm-up ran on the CPU backend")
	}
	if strings.Contains(buf.String(), "warm-up") || !strings.Contains(buf.String(), "model loaded") {
		t.Fatalf("CPU load log: %q", buf.String())
	}
}
