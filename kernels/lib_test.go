package kernels

import (
	"errors"
	"os"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
)

// On a machine without a GPU driver, Open must fail with ErrNoCUDA and not
// panic. With SPECGATE_CUDA_LIB_DIR pointing at an empty directory and no
// libcuda on the loader path, the error must name the library.
func TestOpenWithoutCUDA(t *testing.T) {
	if os.Getenv("SPECGATE_EXPECT_GPU") != "" {
		t.Skip("GPU machine")
	}
	if _, _, err := openLib("libcuda.so.1"); err == nil {
		t.Skip("libcuda present here")
	}
	d, err := Open(0)
	if err == nil {
		d.Close()
		t.Fatal("Open succeeded without libcuda")
	}
	if !errors.Is(err, ErrNoCUDA) {
		t.Fatalf("Open error %v does not wrap ErrNoCUDA", err)
	}
	if !strings.Contains(err.Error(), "libcuda") {
		t.Fatalf("error %q does not name libcuda", err)
	}
}

func TestOpenLibMissing(t *testing.T) {
	t.Setenv(LibDirEnv, t.TempDir())
	_, _, err := openLib("libspecgate-does-not-exist.so.7")
	if !errors.Is(err, ErrNoCUDA) || !strings.Contains(err.Error(), "libspecgate-does-not-exist.so.7") {
		t.Fatalf("got %v", err)
	}
}

// The embedded sources must compile for Hopper (sm_90) and Ampere (sm_80)
// wherever NVRTC is available (no GPU needed); skipped without NVRTC.
func TestCompileSources(t *testing.T) {
	if err := loadNVRTC(); err != nil {
		t.Skipf("no NVRTC: %v", err)
	}
	t.Setenv(KernelCacheEnv, t.TempDir())
	for _, cc := range [][2]int{{9, 0}, {8, 0}} {
		img, arch, err := Compile(cc[0], cc[1])
		if err != nil {
			t.Fatalf("compile for %d.%d: %v", cc[0], cc[1], err)
		}
		if len(img) < 1000 {
			t.Fatalf("%s: image of %d bytes", arch, len(img))
		}
		// Second call: served from the disk cache, identical bytes.
		img2, _, hit, err := compileModule(cc[0], cc[1], nil)
		if err != nil || !hit || string(img2) != string(img) {
			t.Fatalf("cached image differs (hit %v, err %v)", hit, err)
		}
	}
}

// WithEnv maps exactly the documented variables; invalid values keep
// the value it was given.
func TestTuningWithEnv(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	base := Tuning{Gemv: GemvDeep, GemvWarps: 4, AttnSplits: 2}
	if got := base.WithEnv(env(nil)); !reflect.DeepEqual(got, base) {
		t.Fatalf("empty environment changed %+v to %+v", base, got)
	}
	for _, c := range []struct {
		env  map[string]string
		want Tuning
	}{
		{map[string]string{EnvGemv: "ring"}, Tuning{Gemv: GemvRing}},
		{map[string]string{EnvGemv: "bogus", EnvGemvDeep: "1"}, Tuning{Gemv: GemvDeep}},
		{map[string]string{EnvGemv: "shallow", EnvGemvDeep: "1"}, Tuning{Gemv: GemvShallow}},
		{map[string]string{EnvGemvDeep: "0"}, Tuning{}},
		{map[string]string{EnvGemvI8: "shallow"}, Tuning{GemvI8: GemvShallow}},
		{map[string]string{EnvGemvI8: "ring"}, Tuning{}},
		{map[string]string{EnvGemvI8: "deep4split", EnvGemvI8Wave: "0"}, Tuning{GemvI8: GemvI8Deep4Split, NoGemvI8Wave: true}},
		{map[string]string{EnvGemvI8Wave: "1"}, Tuning{}},
		{map[string]string{EnvGemvWarps: "auto"}, Tuning{GemvWarps: GemvWarpsAuto}},
		{map[string]string{EnvGemvWarps: "4"}, Tuning{GemvWarps: 4}},
		{map[string]string{EnvGemvWarps: "3"}, Tuning{}},
		{map[string]string{EnvGemvWarps: "16"}, Tuning{}},
		{map[string]string{EnvGemvPrefetch: "1", EnvAttnPreload: "0", PDLEnv: "0"},
			Tuning{GemvPrefetch: true, NoAttnPreload: true, NoPDL: true}},
		{map[string]string{EnvAttnPreload: "1", PDLEnv: "1", EnvGemvPrefetch: "0"}, Tuning{}},
		{map[string]string{EnvGemvRingBPS: "2", EnvGemvRingWarps: "4", EnvGemvRingMinK: "4096"},
			Tuning{GemvRingBlocksPerSM: 2, GemvRingWarps: 4, GemvRingMinK: 4096}},
		{map[string]string{EnvGemvRingBPS: "9", EnvGemvRingWarps: "1"}, Tuning{}},
		{map[string]string{EnvAttnSplits: "1", EnvAttnKMin: "128"}, Tuning{AttnSplits: 1, AttnSplitMinKeys: 128}},
		{map[string]string{EnvAttnSplits: "0", EnvAttnKMin: "x"}, Tuning{}},
		{map[string]string{EnvAttnGroupMin: "17"}, Tuning{AttnGroupMin: 17}},
		{map[string]string{EnvAttnGroupMin: "-2"}, Tuning{}},
		{map[string]string{EnvHandoffSpinUS: "0"}, Tuning{HandoffSpin: -1}},
		{map[string]string{EnvHandoffSpinUS: "200"}, Tuning{HandoffSpin: 200 * time.Microsecond}},
		{map[string]string{EnvHandoffSpinUS: "-5"}, Tuning{}},
		{map[string]string{KernelDefinesEnv: " -DA=1  -DB=2 "}, Tuning{KernelDefines: []string{"-DA=1", "-DB=2"}}},
		{map[string]string{EnvGemvMMA: "on", EnvGemvMMATiles: "1"}, Tuning{GemvMMA: GemvMMAOn, GemvMMATiles: 1}},
		{map[string]string{EnvGemvMMA: "off", EnvGemvMMATiles: "3"}, Tuning{GemvMMA: GemvMMAOff}},
		{map[string]string{EnvGemvMMATiles: "2"}, Tuning{GemvMMATiles: 2}},
		{map[string]string{EnvGemvMMA: "yes"}, Tuning{}},
	} {
		if got := (Tuning{}).WithEnv(env(c.env)); !reflect.DeepEqual(got, c.want) {
			t.Errorf("env %v: %+v, want %+v", c.env, got, c.want)
		}
	}
}

// The zero Tuning is the measured defaults; out-of-range knobs are errors.
func TestTuningDefaults(t *testing.T) {
	d, err := (Tuning{}).withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	want := Tuning{Gemv: GemvShallow, GemvI8: GemvI8Hybrid8, GemvWarps: 8, GemvMMATiles: 1, GemvRingWarps: 8, AttnSplits: 8,
		AttnSplitMinKeys: 256, HandoffSpin: DefaultHandoffSpin}
	if !reflect.DeepEqual(d, want) {
		t.Fatalf("defaults %+v, want %+v", d, want)
	}
	if again, err := d.withDefaults(); err != nil || !reflect.DeepEqual(again, d) {
		t.Fatalf("defaults not a fixed point: %+v, %v", again, err)
	}
	for _, v := range GemvI8Families {
		if _, err := (Tuning{GemvI8: v}).withDefaults(); err != nil {
			t.Errorf("GemvI8 %q: %v", v, err)
		}
	}
	for _, bad := range []Tuning{{Gemv: "fast"}, {GemvI8: GemvRing}, {GemvWarps: 3}, {GemvRingBlocksPerSM: 9},
		{GemvRingWarps: 1}, {GemvRingMinK: -1}, {AttnSplits: 65}, {AttnSplits: -1}, {AttnSplitMinKeys: -4}, {AttnGroupMin: -5},
		{GemvMMA: 2}, {GemvMMA: -2}, {GemvMMATiles: 3}, {GemvMMATiles: 8}} {
		if _, err := bad.withDefaults(); !errors.Is(err, ErrBadArg) {
			t.Errorf("%+v: err %v, want ErrBadArg", bad, err)
		}
	}
	if _, err := OpenTuned(0, Tuning{GemvWarps: 5}); !errors.Is(err, ErrBadArg) || !strings.Contains(err.Error(), "GemvWarps") {
		t.Fatalf("OpenTuned with GemvWarps 5: %v", err)
	}
}

// Two devices' tunings are independent, and SetTuning changes one only.
func TestTuningPerDevice(t *testing.T) {
	a := &Device{tune: mustDefaults(t, Tuning{})}
	b := &Device{tune: mustDefaults(t, Tuning{AttnSplits: 1, Gemv: GemvDeep})}
	if a.AttnSplitsFor(4096) != 8 || b.AttnSplitsFor(4096) != 1 {
		t.Fatalf("AttnSplitsFor(4096): %d, %d", a.AttnSplitsFor(4096), b.AttnSplitsFor(4096))
	}
	ca, cb := &Ctx{a}, &Ctx{b}
	if ca.gemvName("gemv_norm_m", 1, false) != "gemv_norm_s_m1" || cb.gemvName("gemv_norm_m", 1, false) != "gemv_norm_m1" {
		t.Fatal("GEMV family not per device")
	}
	prev, err := ca.SetTuning(Tuning{GemvI8: GemvShallow, HandoffSpin: time.Second})
	if err != nil || prev.GemvI8 != GemvI8Hybrid8 {
		t.Fatalf("SetTuning: %+v, %v", prev, err)
	}
	if ca.gemvI8Name("gemv_i8_norm", 1) != "gemv_i8_norm_s_m1" || cb.gemvI8Name("gemv_i8_norm", 1) != "gemv_i8_norm_d4s_m1" {
		t.Fatal("int8 GEMV family not per device")
	}
	for v, want := range map[string][2]string{GemvDeep: {"gemv_i8_swiglu_m1", "gemv_i8_resid_m1"},
		GemvI8Hybrid: {"gemv_i8_swiglu_d4s_m1", "gemv_i8_resid_m1"}, GemvI8Hybrid8: {"gemv_i8_swiglu_d4s_m1", "gemv_i8_resid_rg8_m1"}} {
		cb.d.tune.GemvI8 = v
		if g, r := cb.gemvI8Name("gemv_i8_swiglu", 1), cb.gemvI8Name("gemv_i8_resid", 1); g != want[0] || r != want[1] {
			t.Errorf("%s: kernels %s, %s; want %v", v, g, r, want)
		}
		if cb.gemvI8Name("gemv_i8_resid", 3) != "gemv_i8_resid_m3" {
			t.Errorf("%s: batch 3 not deep", v)
		}
	}
	if a.Tuning().HandoffSpin != DefaultHandoffSpin {
		t.Fatal("SetTuning changed HandoffSpin")
	}
	if _, err := ca.SetTuning(Tuning{GemvWarps: 7}); !errors.Is(err, ErrBadArg) || a.Tuning().GemvI8 != GemvShallow {
		t.Fatalf("bad SetTuning: %v, tuning %+v", err, a.Tuning())
	}
}

func mustDefaults(t *testing.T, tu Tuning) Tuning {
	t.Helper()
	d, err := tu.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// Hand-off polling needs spare Ps: with one P the polling GPU worker would
// keep the caller from running until the spin ran out.
func TestSpinAllowed(t *testing.T) {
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	if spinAllowed(DefaultHandoffSpin) {
		t.Fatal("polls with GOMAXPROCS 1")
	}
	runtime.GOMAXPROCS(2)
	if spinAllowed(DefaultHandoffSpin) {
		t.Fatal("polls with GOMAXPROCS 2")
	}
	runtime.GOMAXPROCS(4)
	if !spinAllowed(DefaultHandoffSpin) {
		t.Fatal("GOMAXPROCS 4: no polling with the default spin")
	}
	if spinAllowed(-1) {
		t.Fatal("GOMAXPROCS 4: polls with a negative spin (SPECGATE_GPU_SPIN_US=0)")
	}
}

// The ring GEMV is chosen only where its shared memory fits: inputs (4 B
// per K) plus 64 KiB of ring per 8-warp block.
func TestUseRingFits(t *testing.T) {
	ring := mustDefaults(t, Tuning{Gemv: GemvRing})
	l4 := &Ctx{d: &Device{MaxSmemOptin: 99 << 10, tune: ring}}    // sm_89 opt-in limit
	h100 := &Ctx{d: &Device{MaxSmemOptin: 227 << 10, tune: ring}} // sm_90
	for _, c := range []struct {
		c    *Ctx
		M, K int
		want bool
	}{{l4, 1, 2048, true}, {l4, 1, 11008, false}, {h100, 1, 11008, true}, {h100, 1, 45056, false},
		{h100, 2, 2048, false}, {h100, 1, 2040, false}} {
		if got := c.c.useRing(c.M, c.K); got != c.want {
			t.Errorf("smem limit %d, M=%d K=%d: useRing %v, want %v", c.c.d.MaxSmemOptin, c.M, c.K, got, c.want)
		}
	}
	h100.d.tune.Gemv = GemvShallow
	if h100.useRing(1, 2048) {
		t.Error("useRing with the shallow family")
	}
}

func TestAttnSplitsFor(t *testing.T) {
	d := &Device{tune: mustDefaults(t, Tuning{})}
	for maxLen, want := range map[int]int{0: 8, -1: 8, 1: 1, 256: 1, 257: 2, 512: 2, 513: 4, 1024: 4, 1025: 8, 2048: 8, 100000: 8} {
		if got := d.AttnSplitsFor(maxLen); got != want {
			t.Errorf("AttnSplitsFor(%d) = %d, want %d", maxLen, got, want)
		}
	}
}
