package main

import (
	"fmt"
	"maps"
	"slices"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/gateway"
	"github.com/specgate/specgate/speculative"
)

// modelDrafts builds a local model's model-free draft sources from its
// drafts section (nil when disabled). upstreamModels are the names whose
// cached answers may serve as near-miss drafts besides the model's own.
func modelDrafts(mc gateway.ModelConfig, otherModels []string, eo *engine.Options) (*gateway.Drafts, error) {
	dc := mc.Drafts
	on := func(b *bool) bool { return b == nil || *b }
	if !on(dc.Enabled) {
		return nil, nil
	}
	d := &gateway.Drafts{Known: speculative.NewKnown(speculative.KnownConfig{}), Base: eo.Proposers}
	// model-free drafts are long when they match (a whole predicted file):
	// let the engine verify up to budget nodes per request and step (its
	// adaptive budget still spends only what pays).
	eo.MaxDraft = max(eo.MaxDraft, dc.Budget)
	if dc.Budget == 0 {
		eo.MaxDraft = max(eo.MaxDraft, 32)
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

// draftModels lists the other model names (upstream models and aliases,
// other local models) whose cached answers may draft for model self.
func draftModels(cfg *gateway.Config, self string) []string {
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
