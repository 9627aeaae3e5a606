package kernels

import (
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"
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
		img2, _, _, err := compileModule(cc[0], cc[1])
		if err != nil || string(img2) != string(img) {
			t.Fatalf("cached image differs (err %v)", err)
		}
	}
}

func TestGemvWarpsEnv(t *testing.T) {
	for v, want := range map[string]int{"": 8, "8": 8, "4": 4, "2": 2, "auto": 0, "3": 8, "x": 8, "16": 8} {
		if got := gemvWarpsEnv(v); got != want {
			t.Errorf("gemvWarpsEnv(%q) = %d, want %d", v, got, want)
		}
	}
}

func TestGemvVariantEnv(t *testing.T) {
	for _, c := range []struct{ v, deep, want string }{
		{"", "", GemvShallow}, {"ring", "", GemvRing}, {"deep", "", GemvDeep}, {"shallow", "1", GemvShallow},
		{"", "1", GemvDeep}, {"", "0", GemvShallow}, {"bogus", "", GemvShallow},
	} {
		if got := gemvVariantEnv(c.v, c.deep); got != c.want {
			t.Errorf("gemvVariantEnv(%q, %q) = %q, want %q", c.v, c.deep, got, c.want)
		}
	}
}

// Hand-off polling needs spare Ps: with one P the polling GPU worker would
// keep the caller from running until the spin ran out.
func TestSpinAllowed(t *testing.T) {
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	if spinAllowed() {
		t.Fatal("polls with GOMAXPROCS 1")
	}
	runtime.GOMAXPROCS(2)
	if spinAllowed() {
		t.Fatal("polls with GOMAXPROCS 2")
	}
	runtime.GOMAXPROCS(4)
	if got, want := spinAllowed(), HandoffSpin > 0; got != want {
		t.Fatalf("GOMAXPROCS 4: spinAllowed %v, want %v (HandoffSpin %v)", got, want, HandoffSpin)
	}
}

// The ring GEMV is chosen only where its shared memory fits: inputs (4 B
// per K) plus 64 KiB of ring per 8-warp block.
func TestUseRingFits(t *testing.T) {
	prev := GemvVariant
	GemvVariant = GemvRing
	defer func() { GemvVariant = prev }()
	l4 := &Ctx{d: &Device{MaxSmemOptin: 99 << 10}}    // sm_89 opt-in limit
	h100 := &Ctx{d: &Device{MaxSmemOptin: 227 << 10}} // sm_90
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
	GemvVariant = GemvShallow
	if h100.useRing(1, 2048) {
		t.Error("useRing with the shallow family")
	}
}

func TestAttnSplitsFor(t *testing.T) {
	if AttnSplits != 8 || AttnSplitMinKeys != 256 {
		t.Skipf("SPECGATE_ATTN_SPLITS/KMIN set: %d/%d", AttnSplits, AttnSplitMinKeys)
	}
	for maxLen, want := range map[int]int{0: 8, -1: 8, 1: 1, 256: 1, 257: 2, 512: 2, 513: 4, 1024: 4, 1025: 8, 2048: 8, 100000: 8} {
		if got := AttnSplitsFor(maxLen); got != want {
			t.Errorf("AttnSplitsFor(%d) = %d, want %d", maxLen, got, want)
		}
	}
}
