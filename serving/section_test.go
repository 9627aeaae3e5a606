package serving

import (
	"bytes"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/engine/cpu"
	"github.com/specgate/specgate/speculative"
)

// TestAdaptiveIsTheDefault: a `speculative:` section without `adaptive`
// gets the engine's adaptive budget, for method draft (the draft
// proposer's engine options: FixedDraft false) as for medusa; only
// `adaptive: false` asks for the fixed chain every step.
func TestAdaptiveIsTheDefault(t *testing.T) {
	target, err := engine.Load("../models/specgate-target", engine.LoadOptions{KVTokens: 256})
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	draft, err := engine.Load("../models/specgate-draft", engine.LoadOptions{KVTokens: 256})
	if err != nil {
		t.Fatal(err)
	}
	defer draft.Close()
	for _, c := range []struct {
		yaml      string
		mode      string
		wantFixed bool
	}{
		{"name: m\npath: t\ndraft: d\n", "draft adaptive", false},
		{"name: m\npath: t\ndraft: d\nspeculative: {method: draft, k: 3}\n", "draft adaptive", false},
		{"name: m\npath: t\ndraft: d\nspeculative: {adaptive: true}\n", "draft adaptive", false},
		{"name: m\npath: t\ndraft: d\nspeculative: {adaptive: false}\n", "draft fixed", true},
		{"name: m\npath: t\nspeculative: {method: medusa, heads: h}\n", "medusa adaptive", false},
		{"name: m\npath: t\nspeculative: {method: medusa, heads: h, adaptive: false}\n", "medusa fixed", true},
		{"name: m\npath: t\n", "none", false},
	} {
		mc := validModelConfig(t, c.yaml)
		if got := mc.Speculative.Mode(); got != c.mode {
			t.Errorf("%q: mode %q, want %q", c.yaml, got, c.mode)
		}
		if mc.Speculative.Method != "draft" {
			if got := !mc.Speculative.IsAdaptive(); c.mode != "none" && got != c.wantFixed {
				t.Errorf("%q: fixed = %v, want %v", c.yaml, got, c.wantFixed)
			}
			continue
		}
		sc, err := SpecConfig(mc.Speculative)
		if err != nil {
			t.Fatal(err)
		}
		d, err := speculative.NewDraft(target, draft, sc)
		if err != nil {
			t.Fatal(err)
		}
		if eo := d.EngineOptions(engine.Options{}); eo.FixedDraft != c.wantFixed || eo.MaxDraft < mc.Speculative.K {
			t.Errorf("%q: engine options FixedDraft %v MaxDraft %d, want FixedDraft %v and MaxDraft >= k %d",
				c.yaml, eo.FixedDraft, eo.MaxDraft, c.wantFixed, mc.Speculative.K)
		}
	}
}

// TestCPUSection: the cpu: keys reach the CPU backend's options (threads,
// min_parallel_macs); absent, the backend runs its defaults.
func TestCPUSection(t *testing.T) {
	for _, c := range []struct {
		yaml string
		want engine.CPUOptions
	}{
		{"name: m\npath: ../models/specgate-target\nbackend: cpu\nkv_blocks: 16\ncpu: {threads: 1, min_parallel_macs: 4096}\n",
			engine.CPUOptions{Threads: 1, MinParallelMACs: 4096}},
		{"name: m\npath: ../models/specgate-target\nbackend: cpu\nkv_blocks: 16\ncpu:\n  min_parallel_macs: 1\n",
			engine.CPUOptions{Threads: runtime.GOMAXPROCS(0), MinParallelMACs: 1}},
		{"name: m\npath: ../models/specgate-target\nbackend: cpu\nkv_blocks: 16\n",
			engine.CPUOptions{Threads: runtime.GOMAXPROCS(0), MinParallelMACs: cpu.DefaultMinParallelMACs}},
	} {
		mc := validModelConfig(t, c.yaml)
		m, err := Load(mc, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatalf("%q: %v", c.yaml, err)
		}
		be, ok := m.Weights.Backend().(*engine.CPUBackend)
		if !ok {
			m.Close()
			t.Fatalf("%q: backend %T, want the CPU backend", c.yaml, m.Weights.Backend())
		}
		if got := be.Options(); got != c.want {
			t.Errorf("%q: CPU options %+v, want %+v", c.yaml, got, c.want)
		}
		m.Close()
	}
	for _, bad := range []string{"cpu: {threads: -1}", "cpu: {min_parallel_macs: -3}"} {
		mc := ModelConfig{Name: "m", Path: "p"}
		if err := yaml.Unmarshal([]byte(bad), &mc); err != nil {
			t.Fatal(err)
		}
		mc.ApplyDefaults()
		if err := mc.Validate("models[0]"); err == nil || !strings.Contains(err.Error(), "models[0].cpu.") {
			t.Errorf("%q: err %v, want one naming models[0].cpu.*", bad, err)
		}
	}
}

// validModelConfig decodes one model's YAML strictly (unknown keys fail),
// applies the defaults and validates it as models[0], failing the test on
// any error.
func validModelConfig(t *testing.T, src string) ModelConfig {
	t.Helper()
	var mc ModelConfig
	dec := yaml.NewDecoder(bytes.NewReader([]byte(src)))
	dec.KnownFields(true)
	if err := dec.Decode(&mc); err != nil {
		t.Fatalf("%q: %v", src, err)
	}
	mc.ApplyDefaults()
	if err := mc.Validate("models[0]"); err != nil {
		t.Fatalf("%q: %v", src, err)
	}
	return mc
}
