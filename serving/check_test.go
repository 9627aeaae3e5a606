package serving

import (
	"strings"
	"testing"
)

// TestCheck: the shipped target with its draft and with its Medusa heads
// passes; a missing model, a missing draft and a heads directory that is
// not Medusa heads each give one error naming its key.
func TestCheck(t *testing.T) {
	const target, draft, heads = "../models/specgate-target", "../models/specgate-draft", "../models/specgate-target-medusa"
	for _, c := range []struct {
		m    ModelConfig
		want []string // one error each, containing this
	}{
		{ModelConfig{Path: target, Draft: draft, Speculative: SpeculativeConfig{Method: "draft"}}, nil},
		{ModelConfig{Path: target, Speculative: SpeculativeConfig{Method: "medusa", Heads: heads}}, nil},
		{ModelConfig{Path: target, Draft: heads, Speculative: SpeculativeConfig{Method: "medusa"}}, nil},
		{ModelConfig{Path: "nothere", Speculative: SpeculativeConfig{Method: "none"}}, []string{"models[2].path: nothere: "}},
		{ModelConfig{Path: target, Draft: "nodraft", Speculative: SpeculativeConfig{Method: "draft"}}, []string{"models[2].draft: nodraft: "}},
		{ModelConfig{Path: target, Speculative: SpeculativeConfig{Method: "medusa", Heads: draft}}, []string{"models[2].speculative.heads: "}},
		{ModelConfig{Path: target, Draft: "nohead", Speculative: SpeculativeConfig{Method: "medusa"}}, []string{"models[2].draft: nohead: Medusa heads directory not found"}},
	} {
		errs := c.m.Check("models[2]")
		if len(errs) != len(c.want) {
			t.Errorf("%+v: %d errors %v, want %d", c.m, len(errs), errs, len(c.want))
			continue
		}
		for i, w := range c.want {
			if !strings.HasPrefix(errs[i].Error(), w) {
				t.Errorf("%+v: error %q, want it to start with %q", c.m, errs[i], w)
			}
		}
	}
}
