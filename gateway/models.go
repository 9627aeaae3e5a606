package gateway

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/serving"
)

// LoadOptions adjust LoadModels.
type LoadOptions struct {
	Logger *slog.Logger // nil: slog.Default()
	// EngineOptions, when set, adjusts every engine's options just before
	// it starts (tests: a fixed step-cost curve for the adaptive budget).
	EngineOptions func(*engine.Options)
}

// LoadModels loads every model of cfg's `models:` section (serving.Load)
// and returns them as the gateway serves them, with one func that closes
// them all. Errors name the entry: "models[i] NAME: ...".
func LoadModels(cfg *Config, o LoadOptions) ([]*LocalModel, func(), error) {
	var out []*LocalModel
	var loaded []*serving.Model
	closeAll := func() {
		for i := len(loaded) - 1; i >= 0; i-- {
			loaded[i].Close()
		}
	}
	for i, mc := range cfg.Models {
		m, err := serving.Load(mc, serving.Options{Logger: o.Logger, NearMissModels: DraftModels(cfg, mc.Name), EngineOptions: o.EngineOptions})
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("models[%d] %s: %w", i, mc.Name, err)
		}
		loaded = append(loaded, m)
		out = append(out, &LocalModel{
			Name: mc.Name, Aliases: mc.Aliases, Generator: m.Engine, Tokenizer: m.Weights.Tokenizer,
			ContextLength: m.Weights.Config.MaxPositions, DefaultMaxTokens: mc.DefaultMaxTokens, KV: m.Weights.KV(), Created: m.Created,
			Drafts: NewDrafts(m.Drafts),
		})
	}
	return out, closeAll, nil
}

// NewDrafts is the gateway's view of a model's draft sources (nil: none).
func NewDrafts(d *serving.DraftSources) *Drafts {
	if d == nil {
		return nil
	}
	return &Drafts{Suffix: d.Suffix, Known: d.Known, Base: d.Base, NearMissBand: d.NearMissBand, NearMissModels: d.NearMissModels}
}

// DraftModels lists the other model names (upstream models and aliases,
// other local models) whose cached answers may draft for model self.
func DraftModels(cfg *Config, self string) []string {
	var out []string
	seen := map[string]bool{self: true}
	add := func(n string) {
		if n != "" && !seen[n] && len(out) < 16 {
			seen[n] = true
			out = append(out, n)
		}
	}
	for _, u := range cfg.Upstreams {
		for _, m := range u.Models {
			add(m)
		}
		for _, a := range slices.Sorted(maps.Keys(u.Aliases)) {
			add(a)
		}
	}
	for _, m := range cfg.Models {
		add(m.Name)
	}
	return out
}
