package serving

import (
	"context"
	"log/slog"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/cuda"
)

// graphWarmer is a backend that captures its CUDA graphs at start-up
// (*cuda.Backend; the CPU backend is not one).
type graphWarmer interface {
	Warmup(ctx context.Context, p cuda.WarmupPlan) (cuda.WarmupStats, error)
}

// warmupPlan is the start-up graph warm-up of a model mc configures with
// engine options eo: decode batches up to the engine's MaxBatch, contexts
// up to the model's length, tree steps (trees: the target verifies trees;
// a draft model steps plain batches only).
func warmupPlan(mc ModelConfig, eo engine.Options, cfg engine.Config, trees bool) cuda.WarmupPlan {
	p := cuda.WarmupPlan{MaxBatch: eo.MaxBatch, MaxContext: cfg.MaxPositions}
	if p.MaxBatch <= 0 {
		p.MaxBatch = 32 // the engine's default
	}
	if !trees {
		p.MaxTree = -1
	}
	return p
}

// WarmupGraphs runs the start-up graph warm-up of model mc's backend b
// (role: "target" or "draft" in the log; trees: the model verifies draft
// trees) with the engine options eo it will run with, unless graph_warmup
// is false or b has none (the CPU backend); it reports whether it ran.
// Load calls it; so does an in-process server that loads its engine
// itself (bench workload).
func WarmupGraphs(log *slog.Logger, mc ModelConfig, role string, b engine.Backend, eo engine.Options, cfg engine.Config, trees bool) bool {
	return warmGraphs(log, mc, role, b, warmupPlan(mc, eo, cfg, trees))
}

// warmGraphs runs the warm-up on b when the model's graph_warmup is on and
// b has one, logging its progress; it reports whether it ran. A failed
// warm-up is logged and serving goes on: shapes not captured are captured
// at their second sighting, as without it.
func warmGraphs(log *slog.Logger, mc ModelConfig, role string, b engine.Backend, p cuda.WarmupPlan) bool {
	w, ok := b.(graphWarmer)
	if !ok || (mc.GraphWarmup != nil && !*mc.GraphWarmup) {
		return false
	}
	lg := log.With("model", mc.Name, "role", role)
	p.Log = lg.Info
	st, err := w.Warmup(context.Background(), p)
	if err != nil {
		lg.Warn("cuda graph warm-up failed; graphs are captured while serving", "err", err.Error(),
			"captured", st.Captured)
	}
	return true
}
