package cuda

import (
	"errors"
	"strings"
	"testing"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/kernels"
)

// The environment switches only turn features off, and only through
// Options.WithEnv; the kernel knobs go into Options.Tuning.
func TestOptionsWithEnv(t *testing.T) {
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	env[EnvAttnTile], env[EnvDeviceSampling] = "0", "1"
	o := Options{NoGraphBatched: true}.WithEnv(getenv)
	if !o.NoAttnTile || o.NoDeviceSampling || !o.NoGraphBatched {
		t.Fatalf("WithEnv: %+v", o)
	}
	env[EnvAttnTile], env[EnvDeviceSampling] = "", "0"
	if o := (Options{}).WithEnv(getenv); o.NoAttnTile || !o.NoDeviceSampling || o.NoGraphBatched {
		t.Fatalf("WithEnv: %+v", o)
	}
	if o := (Options{}).WithEnv(getenv); o.NoDeviceHeads || o.NoHeadsFused || o.FastVerify {
		t.Fatalf("WithEnv without heads/exact switches: %+v", o)
	}
	env[EnvDeviceHeads], env[EnvHeadsFused], env[EnvExactVerify] = "0", "0", "0"
	if o := (Options{}).WithEnv(getenv); !o.NoDeviceHeads || !o.NoHeadsFused || !o.FastVerify {
		t.Fatalf("WithEnv with heads/exact switches: %+v", o)
	}
	env[EnvExactVerify] = "1"
	if o := (Options{FastVerify: true}).WithEnv(getenv); !o.FastVerify {
		t.Fatalf("WithEnv dropped Options.FastVerify: %+v", o)
	}
	if o := (Options{}).WithEnv(getenv); o.FastVerify {
		t.Fatalf("SPECGATE_EXACT_VERIFY=1 set FastVerify: %+v", o)
	}
	env[kernels.EnvGemvI8], env[kernels.EnvGemvWarps], env[kernels.PDLEnv] = "shallow", "4", "0"
	o = Options{Tuning: kernels.Tuning{AttnSplits: 2}}.WithEnv(getenv)
	if want := (kernels.Tuning{AttnSplits: 2, GemvI8: kernels.GemvShallow, GemvWarps: 4, NoPDL: true}); o.Tuning.GemvI8 != want.GemvI8 ||
		o.Tuning.GemvWarps != want.GemvWarps || o.Tuning.NoPDL != want.NoPDL || o.Tuning.AttnSplits != want.AttnSplits {
		t.Fatalf("kernel tuning from the environment: %+v, want %+v", o.Tuning, want)
	}
}

// A tuning knob out of range fails New with ErrBadArg naming the knob,
// on any machine (checked before any CUDA library is loaded).
func TestNewRejectsBadTuning(t *testing.T) {
	cfg := engine.Config{HiddenSize: 48, IntermediateSize: 80, NumLayers: 1, NumHeads: 6, NumKVHeads: 2, HeadDim: 8,
		RMSNormEps: 1e-5, RopeTheta: 10000, RopeScaling: engine.RopeScaling{Type: engine.RopeDefault}, MaxPositions: 64,
		VocabSize: 61, BOS: 1, EOS: []int32{2}}
	_, err := New(cfg, nil, Options{Random: true, Tuning: kernels.Tuning{GemvWarps: 3}})
	if !errors.Is(err, kernels.ErrBadArg) || !strings.Contains(err.Error(), "GemvWarps") {
		t.Fatalf("GemvWarps 3: %v", err)
	}
}
