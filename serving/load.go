package serving

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/cuda"
	"github.com/specgate/specgate/medusa"
	"github.com/specgate/specgate/speculative"
)

// Options adjust Load.
type Options struct {
	// Logger receives the backend fallback and "model loaded" lines (nil:
	// slog.Default()).
	Logger *slog.Logger
	// NearMissModels are other model names whose cached answers may draft
	// for this one (DraftSources.NearMissModels).
	NearMissModels []string
	// EngineOptions, when set, adjusts the engine's options last, just
	// before the engine starts (tests give the adaptive budget a fixed
	// step-cost curve with it).
	EngineOptions func(*engine.Options)
}

// Model is one loaded local model: its weights, the running engine and its
// model-free draft sources. Close stops the engine and frees the weights
// (the target's and a draft model's).
type Model struct {
	Config  ModelConfig
	Weights *engine.Model
	Engine  *engine.Engine
	// Drafts are the model-free draft sources; nil when drafts.enabled is
	// false.
	Drafts *DraftSources
	// OnGPU: the model runs on the CUDA backend (false when backend auto
	// fell back to the CPU).
	OnGPU   bool
	Created time.Time // the model directory's modification time
	closers []func()
}

// Close stops the engine and releases the weights; safe to call once.
func (m *Model) Close() {
	for i := len(m.closers) - 1; i >= 0; i-- {
		m.closers[i]()
	}
	m.closers = nil
}

// Load loads the model mc configures on its backend (engine/cuda.Select:
// cpu, cuda, or auto = CUDA, else the CPU backend), its proposer (a draft
// model or Medusa heads, adaptive unless speculative.adaptive is false)
// and its model-free draft sources, and starts its engine. Errors name the
// key at fault ("path", "draft", "speculative", "drafts"); the caller
// prefixes the entry.
func Load(mc ModelConfig, o Options) (*Model, error) {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	start := time.Now()
	out := &Model{Config: mc}
	fail := func(err error) (*Model, error) {
		out.Close()
		return nil, err
	}
	lo := engine.LoadOptions{Quantize: mc.Quantize, Threads: mc.CPU.Threads, MinParallelMACs: mc.CPU.MinParallelMACs}
	if mc.KVBlocks > 0 {
		lo.KVTokens = mc.KVBlocks * engine.DefaultBlockSize
	}
	onGPU := mc.Backend == "cuda" || mc.Backend == "auto"
	// The GPU backend's switches and kernel tuning (SPECGATE_GEMV, ...) come
	// from the environment here, the serving edge, and nowhere below it.
	nb, err := cuda.Select(mc.Backend, cuda.Options{}.WithEnv(os.Getenv), lo.CPUOptions(), func(err error) {
		if onGPU {
			log.Info("no GPU; using the CPU backend", "model", mc.Name, "reason", err.Error())
		}
		onGPU = false
	})
	if err != nil {
		return nil, err
	}
	lo.NewBackend = nb
	m, err := engine.Load(mc.Path, lo)
	if err != nil {
		return nil, fmt.Errorf("path %s: %w", mc.Path, err)
	}
	out.closers = append(out.closers, func() { _ = m.Close() })
	if m.Tokenizer == nil {
		return fail(fmt.Errorf("path %s: no tokenizer.json", mc.Path))
	}
	eo := engine.Options{MaxBatch: mc.MaxBatch}
	switch mc.Speculative.Method {
	case "draft":
		dlo := lo
		dlo.Quantize = "" // the target's setting
		dm, err := engine.Load(mc.Draft, dlo)
		if err != nil {
			return fail(fmt.Errorf("draft %s: %w", mc.Draft, err))
		}
		out.closers = append(out.closers, func() { _ = dm.Close() })
		sc, err := SpecConfig(mc.Speculative)
		var d *speculative.Draft
		if err == nil {
			d, err = speculative.NewDraft(m, dm, sc)
		}
		if err != nil {
			return fail(fmt.Errorf("speculative: %w", err))
		}
		eo = d.EngineOptions(eo) // FixedDraft unless adaptive
		// the draft model steps plain batches only (its chains are one
		// token per step)
		warmGraphs(log, mc, "draft", dm.Backend(), warmupPlan(mc, eo, dm.Config, false))
	case "medusa":
		p, err := medusa.New(m, medusa.Spec{Heads: mc.MedusaHeads(), Tree: mc.Speculative.Tree, VocabLimit: mc.Speculative.VocabLimit,
			Threads: mc.CPU.Threads})
		if err != nil {
			return fail(fmt.Errorf("speculative (medusa): %w", err))
		}
		eo.Proposers = append(eo.Proposers, p)
		eo.FixedDraft = !mc.Speculative.IsAdaptive()
	}
	if onGPU { // false when auto fell back to the CPU backend
		// multi-step greedy decoding for a lone greedy request: one host
		// round trip per 8 tokens (docs/cuda.md)
		eo.DecodeSteps = 8
	}
	drafts, err := ModelDrafts(mc, o.NearMissModels, &eo)
	if err != nil {
		return fail(err)
	}
	if o.EngineOptions != nil {
		o.EngineOptions(&eo)
	}
	// after medusa.New (its heads are loaded on the backend), before the
	// engine takes requests
	warmGraphs(log, mc, "target", m.Backend(), warmupPlan(mc, eo, m.Config, true))
	eng := engine.New(m, eo)
	out.closers = append(out.closers, func() { _ = eng.Close() })
	out.Weights, out.Engine, out.Drafts, out.OnGPU = m, eng, drafts, onGPU
	out.Created = time.Now()
	if st, _ := os.Stat(mc.Path); st != nil {
		out.Created = st.ModTime()
	}
	backend := "cpu"
	if onGPU {
		backend = "cuda"
	}
	log.Info("model loaded", "model", mc.Name, "path", mc.Path, "backend", backend, "layers", m.Config.NumLayers,
		"context", m.Config.MaxPositions, "kv_blocks", m.KV().NumBlocks(), "speculation", mc.Speculative.Mode(),
		"load_ms", time.Since(start).Milliseconds())
	return out, nil
}

// DraftSources are a model's model-free draft sources (the gateway's
// Drafts is built from them).
type DraftSources struct {
	Suffix         *speculative.Suffix // nil = off
	Known          *speculative.Known
	Base           []engine.Proposer // the engine's own proposers, listed again beside the model-free ones
	NearMissBand   float32           // 0 = no near-miss drafts
	NearMissModels []string
}

// ModelDrafts builds a model's model-free draft sources from its drafts
// section (nil when disabled) and raises eo.MaxDraft to their budget.
// otherModels are the names whose cached answers may serve as near-miss
// drafts besides the model's own.
func ModelDrafts(mc ModelConfig, otherModels []string, eo *engine.Options) (*DraftSources, error) {
	dc := mc.Drafts
	on := func(b *bool) bool { return b == nil || *b }
	if !on(dc.Enabled) {
		return nil, nil
	}
	d := &DraftSources{Known: speculative.NewKnown(speculative.KnownConfig{}), Base: eo.Proposers}
	// model-free drafts are long when they match (a whole predicted file):
	// let the engine verify up to budget nodes per request and step (its
	// adaptive budget still spends only what pays).
	eo.MaxDraft = max(eo.MaxDraft, dc.Budget)
	if dc.Budget == 0 {
		// 64: on the H100 an exact 64-token tree step (the default
		// verification path) costs 5.7x a one-token step, 484 vs 85 µs of
		// device time (docs/cuda.md, round 6; cuBLAS FastVerify, not
		// exact, ~3x), so an unchanged predicted file that keeps matching
		// still pays at that length; on the CPU the budget grants ~10.
		eo.MaxDraft = max(eo.MaxDraft, 64)
	}
	if on(dc.Answers) || on(dc.PromptLookup) {
		s, err := speculative.NewSuffix(speculative.SuffixConfig{MaxBytes: dc.MaxBytes, Policy: dc.Policy,
			NoAnswers: !on(dc.Answers), NoPrompt: !on(dc.PromptLookup)})
		if err != nil {
			return nil, fmt.Errorf("drafts: %w", err)
		}
		d.Suffix = s
	}
	switch {
	case dc.NearMissBand == 0:
		d.NearMissBand = 0.35
	case dc.NearMissBand > 0:
		d.NearMissBand = dc.NearMissBand
	}
	d.NearMissModels = otherModels
	return d, nil
}
