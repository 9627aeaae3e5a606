package medusa

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/specgate/specgate/engine"
)

// FuzzLoadHydra: a Hydra directory whose weights file and config.json are
// any bytes (seeded with the PyTorch golden directories on the golden base
// target, H = 64, vocabulary 320, and the hand-made tinyVariants on the
// tiny target, H = 4, vocabulary 16) either loads or gets an error wrapping
// ErrFormat or ErrMismatch from Load and from Check, never a panic; a
// directory Load takes passes Check too (config check is never stricter
// than serve), its proposer proposes a tree, and Load plus Check allocate
// at most a bounded multiple of the input (the [V][r] token table, the
// weights as float32, the lm_head rows: no size taken from a header alone).
//
//	go test -run '^$' -fuzz FuzzLoadHydra -fuzztime 2m ./medusa/
func FuzzLoadHydra(f *testing.F) {
	golden, tiny := goldenBase(f), tinyTarget(f, 4)
	for _, g := range []string{"hydra", "hydra-compact", "hydra-shared"} {
		w, err := os.ReadFile(filepath.Join("testdata/golden", g, HydraWeightsFile))
		if err != nil {
			f.Fatal(err)
		}
		c, err := os.ReadFile(filepath.Join("testdata/golden", g, ConfigFile))
		if err != nil {
			f.Fatal(err)
		}
		if _, err := Load(filepath.Join("testdata/golden", g), golden, LoadOptions{}); err != nil {
			f.Fatalf("seed %s: %v", g, err) // the seeds load: mutations start from valid heads
		}
		f.Add(w, c, true, uint16(0))
	}
	for i, v := range tinyVariants() {
		th := v.th
		d := th.write(f)
		w, _ := os.ReadFile(filepath.Join(d, HydraWeightsFile))
		c, _ := os.ReadFile(filepath.Join(d, ConfigFile))
		if _, err := Load(d, tiny, LoadOptions{VocabLimit: v.limit + i%2}); err != nil {
			f.Fatalf("seed %s: %v", v.name, err)
		}
		f.Add(w, c, false, uint16(v.limit+i%2))
	}
	goldenFreq, err := os.ReadFile("testdata/golden/hydra/token_frequency.json")
	if err != nil {
		f.Fatal(err)
	}
	tinyFreqJSON, _ := json.Marshal(map[string]any{"counts": tinyFreq(16)})
	f.Fuzz(func(t *testing.T, w, c []byte, isGolden bool, lim uint16) {
		d := t.TempDir()
		for name, b := range map[string][]byte{HydraWeightsFile: w, ConfigFile: c,
			"token_frequency.json": goldenFreq, "head_token_frequency.json": tinyFreqJSON} {
			if err := os.WriteFile(filepath.Join(d, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		target := tiny
		if isGolden {
			target = golden
		}
		H, V := target.Config.HiddenSize, target.Config.VocabSize
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		cerr := Check(Spec{Heads: d}, H, V)
		h, lerr := Load(d, target, LoadOptions{VocabLimit: int(lim) % (V + 8), Threads: 1})
		runtime.ReadMemStats(&after)
		// legitimate: the weights as float32 (4x an I8 file), the [V][r]
		// token table and the lm_head rows (r <= H), and small change
		bound := uint64(16*(len(w)+len(c))) + uint64(8*V*H*4) + 8<<20
		if got := after.TotalAlloc - before.TotalAlloc; got > bound {
			t.Fatalf("Load and Check allocated %d bytes for %d + %d input bytes (bound %d)", got, len(w), len(c), bound)
		}
		for _, e := range []struct {
			who string
			err error
		}{{"Check", cerr}, {"Load", lerr}} {
			if e.err != nil && !errors.Is(e.err, ErrFormat) && !errors.Is(e.err, ErrMismatch) {
				t.Fatalf("%s: error %v: want ErrFormat or ErrMismatch", e.who, e.err)
			}
		}
		if lerr != nil {
			return
		}
		if cerr != nil && lim == 0 {
			t.Fatalf("Load took the directory, Check refused it: %v", cerr)
		}
		if !h.IsHydra() {
			return // a Medusa config.json beside a Hydra weights file: Load looked for medusa_lm_head.safetensors
		}
		p, err := NewProposer(h, nil)
		if err != nil {
			t.Fatalf("NewProposer on loaded heads: %v", err)
		}
		hid := make([]float32, H)
		for i := range hid {
			hid[i] = float32(i%7) - 3
		}
		props, err := p.Propose(context.Background(), []engine.ProposeRequest{{Hidden: hid, Budget: 16, MaxDepth: 8, Generated: []int32{3}}})
		if err != nil {
			t.Fatalf("Propose: %v", err)
		}
		for _, x := range props[0].Tokens {
			if x < 0 || int(x) >= V {
				t.Fatalf("proposed token %d outside the vocabulary %d", x, V)
			}
		}
	})
}
