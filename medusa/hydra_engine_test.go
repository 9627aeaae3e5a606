package medusa

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/safetensors"
	"github.com/specgate/specgate/speculative"
)

// shippedHydra is the shipped Hydra heads directory (hydra-train's export,
// int8), when it exists.
const shippedHydra = "../models/specgate-target-hydra"

// randomHydraDir writes Hydra heads for the shipped target (hidden 384,
// vocabulary 8192) with random weights into a temp dir: 3 heads x 2
// blocks, the compact layout (hydra_embed_proj, r = 32), sharing the
// target's lm_head, fp16. Small weights keep each head close to the target's
// own prediction from h, so the tree still matches the target now and then
// (repeated tokens); lossless tests need some accepted nodes, not good heads.
func randomHydraDir(t testing.TB) string {
	t.Helper()
	const H, r, K, L = 384, 32, 3, 2
	rng := rand.New(rand.NewPCG(17, 4))
	var ts []safetensors.Tensor
	add := func(name string, std float64, shape ...int64) {
		n := int64(1)
		for _, d := range shape {
			n *= d
		}
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * std)
		}
		ts = append(ts, safetensors.Tensor{Name: name, DType: safetensors.F16, Shape: shape, Data: safetensors.EncodeF16(v)})
	}
	add("hydra_embed_proj.weight", 1/math.Sqrt(H), r, H)
	for i := range K {
		add(fmt.Sprintf("hydra_mlp.%d.0.linear.weight", i), 0.02, H, H+int64(i+1)*r)
		add(fmt.Sprintf("hydra_mlp.%d.0.linear.bias", i), 0.01, H)
		for j := 1; j < L; j++ {
			add(fmt.Sprintf("hydra_mlp.%d.%d.linear.weight", i, j), 0.02, H, H)
			add(fmt.Sprintf("hydra_mlp.%d.%d.linear.bias", i, j), 0.01, H)
		}
	}
	dir := t.TempDir()
	if err := safetensors.Write(filepath.Join(dir, HydraWeightsFile), ts, nil); err != nil {
		t.Fatal(err)
	}
	cfg, _ := json.Marshal(map[string]any{"architectures": []string{"HydraModel"}, "base_model_name_or_path": "models/specgate-target",
		"hidden_size": H, "vocab_size": 8192, "hydra_num_heads": K, "hydra_num_layers": L, "hydra_head_arch": "mlp", "grounded_heads": true,
		"torch_dtype": "float16", "specgate": map[string]any{"share_lm_head": true, "embed_dim": r,
			"tree": [][]int{{0}, {1}, {0, 0}, {2}, {0, 1}, {0, 0, 0}, {1, 0}}, "nodes": 7}})
	if err := os.WriteFile(filepath.Join(dir, ConfigFile), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

var (
	hydraDirOnce, hydraOnce sync.Once
	hydraDir                string
	hydraErr, hydraLoadErr  error
	hydraHeads              *Heads
)

// hydraDirForShipped is the Hydra heads directory the engine tests run:
// $SPECGATE_HYDRA_HEADS, else the shipped one (models/specgate-target-hydra)
// when present, else random heads (randomHydraDir, written once per test
// binary into a temp dir).
func hydraDirForShipped(t testing.TB) string {
	t.Helper()
	hydraDirOnce.Do(func() {
		hydraDir = os.Getenv("SPECGATE_HYDRA_HEADS")
		if hydraDir == "" {
			if _, err := os.Stat(filepath.Join(shippedHydra, ConfigFile)); err == nil {
				hydraDir = shippedHydra
			}
		}
		if hydraDir != "" {
			return
		}
		d, err := os.MkdirTemp("", "hydra-random")
		if err != nil {
			hydraErr = err
			return
		}
		src := randomHydraDir(t)
		for _, f := range []string{ConfigFile, HydraWeightsFile} {
			b, err := os.ReadFile(filepath.Join(src, f))
			if err == nil {
				err = os.WriteFile(filepath.Join(d, f), b, 0o644)
			}
			if err != nil {
				hydraErr = err
				return
			}
		}
		hydraDir = d
	})
	if hydraErr != nil {
		t.Fatal(hydraErr)
	}
	t.Logf("Hydra heads: %s", hydraDir)
	return hydraDir
}

// hydraForShipped loads hydraDirForShipped's heads for the shipped target
// (CPU) once per test binary.
func hydraForShipped(t *testing.T) (*engine.Model, *Heads, string) {
	t.Helper()
	target, _ := shipped(t)
	dir := hydraDirForShipped(t)
	hydraOnce.Do(func() { hydraHeads, hydraLoadErr = Load(dir, target, LoadOptions{}) })
	if hydraLoadErr != nil {
		t.Fatal(hydraLoadErr)
	}
	return target, hydraHeads, dir
}

// TestHydraLosslessGreedy: TestLosslessGreedy with Hydra heads (fixed
// tree, a wide tree, adaptive): every output equals plain greedy decoding.
func TestHydraLosslessGreedy(t *testing.T) {
	target, heads, _ := hydraForShipped(t)
	losslessGreedy(t, target, heads)
}

// TestHydraSampledSameSeed: TestSampledSameSeed with Hydra heads.
func TestHydraSampledSameSeed(t *testing.T) {
	target, heads, _ := hydraForShipped(t)
	sampledSameSeed(t, target, heads)
}

// recordingProposer is a Hydra Proposer (its HeadsProposer and
// HiddenNeeder methods promoted) that records what the engine handed it.
type recordingProposer struct {
	*Proposer
	mu                      sync.Mutex
	calls, hidden, headTops int
}

func (r *recordingProposer) Propose(ctx context.Context, reqs []engine.ProposeRequest) ([]engine.Proposal, error) {
	r.mu.Lock()
	for _, q := range reqs {
		r.calls++
		if q.Hidden != nil {
			r.hidden++
		}
		if q.HeadTop != nil {
			r.headTops++
		}
	}
	r.mu.Unlock()
	return r.Proposer.Propose(ctx, reqs)
}

// TestHydraNeverOnDevice: on a 2-thread CPU backend, where medusa.New
// registers a one-node Medusa tree's heads inside the forward (attachCPU),
// a Hydra proposer registers nothing (its head 0 needs the pending token,
// sampled after the forward): DeviceHeads is 0, DeviceError says why, the
// backend's registrations stay empty (the next Medusa proposer gets id 1),
// and the engine hands it hidden rows, never HeadTop; its output equals
// plain decoding's. Likewise with SPECGATE_DEVICE_HEADS unset or 1.
func TestHydraNeverOnDevice(t *testing.T) {
	_, _, dir := hydraForShipped(t)
	target, err := engine.Load(shippedTarget, engine.LoadOptions{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	b := target.Backend()
	if _, ok := b.(*engine.CPUBackend); !ok {
		t.Fatalf("backend %T, want the CPU backend", b)
	}
	for _, tree := range []string{"1", "2", "chain"} {
		p, err := New(target, Spec{Heads: dir, Tree: tree})
		if err != nil {
			t.Fatal(err)
		}
		if !p.Heads().IsHydra() {
			t.Fatal("not Hydra heads")
		}
		if id := p.DeviceHeads(b); id != 0 {
			t.Fatalf("tree %s: Hydra heads registered on the CPU backend as %d", tree, id)
		}
		if !errors.Is(p.DeviceError(), ErrHydraOnHost) {
			t.Fatalf("tree %s: DeviceError %v", tree, p.DeviceError())
		}
	}
	p, err := New(target, Spec{Heads: dir, Tree: "1"})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recordingProposer{Proposer: p}
	plain := engine.New(target, engine.Options{})
	defer plain.Close()
	e := engine.New(target, engine.Options{Proposers: []engine.Proposer{rec}, FixedDraft: true, MaxDraft: 1})
	defer e.Close()
	for i, text := range speculative.BenchPrompts()[:3] {
		req := engine.GenerateRequest{Prompt: target.Tokenizer.Encode(text, true), MaxTokens: 24, Sampling: engine.SamplingParams{SkipLogprobs: true}}
		want, _, err := generate(plain, req)
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := generate(e, req)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("prompt %d: Hydra output %v, plain %v", i, got, want)
		}
	}
	if rec.calls == 0 || rec.hidden != rec.calls || rec.headTops != 0 {
		t.Fatalf("engine asked the Hydra proposer %d times: %d with a hidden row, %d with device heads' candidates (want all, none)", rec.calls, rec.hidden, rec.headTops)
	}
	// nothing was registered: a Medusa one-node tree gets the first id
	m, err := New(target, Spec{Heads: shippedHeads, Tree: "1"})
	if err != nil {
		t.Fatal(err)
	}
	if id := m.DeviceHeads(b); id != 1 {
		t.Fatalf("the first Medusa registration after the Hydra proposers got id %d, want 1 (err %v)", id, m.DeviceError())
	}
}

// FuzzParseConfig: any bytes as a heads config.json (Medusa or Hydra)
// either parse into a config whose heads, layers and tree are in range, or
// fail with ErrFormat naming the file; never a panic.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		`{"medusa_num_heads": 5, "medusa_num_layers": 1}`,
		`{"medusa_num_heads": 3, "medusa_num_layers": 2, "specgate": {"tree": [[0], [0, 0], [1]], "nodes": 2, "head_vocab": 8, "token_frequency": "f.json"}}`,
		`{"architectures": ["HydraModel"], "hydra_num_heads": 5, "hydra_num_layers": 2, "hydra_head_arch": "mlp", "grounded_heads": true, "torch_dtype": "int8", "specgate": {"embed_dim": 64, "tree": [[0], [1], [0, 0]]}}`,
		`{"hydra_num_heads": 2, "hydra_num_layers": 1}`,
		`{"architectures": ["HydraModel"], "hydra_num_heads": 2, "hydra_num_layers": 1, "grounded_heads": false}`,
		`{"architectures": ["HydraModel"], "medusa_num_heads": 2, "hydra_num_layers": 1}`,
		`{"hydra_num_heads": 1e9, "hydra_num_layers": -1, "specgate": {"embed_dim": -3}}`,
		`[]`, `null`, `{"specgate": 5}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := ParseConfig(raw, "d/config.json")
		if err != nil {
			if !errors.Is(err, ErrFormat) || !strings.HasPrefix(err.Error(), "d/config.json: ") {
				t.Fatalf("error %q: want ErrFormat naming the file", err)
			}
			return
		}
		if c.NumHeads < 1 || c.NumHeads > 64 || c.NumLayers < 0 || c.NumLayers > 16 || c.Specgate.EmbedDim < 0 {
			t.Fatalf("accepted %+v", c)
		}
		if c.Hydra && (c.NumLayers < 1 || c.NumHeads != c.HydraNumHeads || c.NumLayers != c.HydraNumLayers || (c.GroundedHeads != nil && !*c.GroundedHeads)) {
			t.Fatalf("accepted Hydra config %+v", c)
		}
		if _, err := ParseTree("", c); err != nil {
			t.Fatalf("accepted config's own tree: %v", err)
		}
	})
}
