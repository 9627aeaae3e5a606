package engine

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/specgate/specgate/safetensors"
)

// golden is engine/testdata/hf/<case>/golden.json, written by the HF
// transformers script (tools/): logits of fixed sequences and a 64-token
// greedy continuation.
type golden struct {
	Sequences    [][]int32 `json:"sequences"`
	LogitsFile   string    `json:"logits_file"`
	VocabSize    int       `json:"vocab_size"`
	GreedyPrompt []int32   `json:"greedy_prompt"`
	Greedy       []int32   `json:"greedy"`
}

const goldenDir = "testdata/hf"

// TestHFGoldens compares the CPU forward with HF transformers: max |Δlogit|
// <= 1e-3 on every sequence and an identical greedy continuation.
func TestHFGoldens(t *testing.T) {
	entries, err := os.ReadDir(goldenDir)
	if errors.Is(err, os.ErrNotExist) {
		t.Skip("no HF goldens yet (engine/testdata/hf)")
	}
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(goldenDir, e.Name())
		if _, err := os.Stat(filepath.Join(dir, "golden.json")); err != nil {
			continue
		}
		n++
		t.Run(e.Name(), func(t *testing.T) { checkGolden(t, dir) })
	}
	if n == 0 {
		t.Fatalf("%s exists but holds no case with golden.json", goldenDir)
	}
}

func checkGolden(t *testing.T, dir string) {
	raw, err := os.ReadFile(filepath.Join(dir, "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g golden
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatalf("golden.json: %v", err)
	}
	modelDir := dir
	if b, err := os.ReadFile(filepath.Join(dir, "model_dir")); err == nil {
		modelDir = filepath.Join("..", strings.TrimSpace(string(b)))
	}
	m, err := Load(modelDir, LoadOptions{SkipTokenizer: true, KVTokens: 4096, DisablePrefixCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	V := m.Config.VocabSize
	if g.VocabSize != 0 && g.VocabSize != V {
		t.Fatalf("golden vocab_size %d, config %d", g.VocabSize, V)
	}
	lf := g.LogitsFile
	if lf == "" {
		lf = "logits.f32"
	}
	data, err := os.ReadFile(filepath.Join(dir, lf))
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, s := range g.Sequences {
		total += len(s) * V
	}
	if len(data) != 4*total {
		t.Fatalf("%s: %d bytes, want %d", lf, len(data), 4*total)
	}
	off := 0
	var worst float64
	for si, seq := range g.Sequences {
		s := m.NewSequence()
		lg, err := s.Forward(seq, nil, nil)
		s.Free()
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range lg {
			want := math.Float32frombits(binary.LittleEndian.Uint32(data[4*(off+i):]))
			d := math.Abs(float64(v) - float64(want))
			if d > worst || math.IsNaN(d) {
				worst = d
			}
			if !(d <= 1e-3) {
				t.Fatalf("sequence %d, token %d, id %d: logit %v, HF %v (|Δ| %g)%s", si, i/V, i%V, v, want, d,
					diagnoseInvFreq(m, seq, data[4*off:4*(off+len(seq)*V)]))
			}
		}
		off += len(seq) * V
	}
	if len(g.Greedy) > 0 {
		got := greedyDecode(t, m, g.GreedyPrompt, len(g.Greedy))
		if fmt.Sprint(got) != fmt.Sprint(g.Greedy) {
			t.Fatalf("greedy continuation differs:\n got %v\nwant %v", got, g.Greedy)
		}
	}
	t.Logf("%s: %d sequences, max |Δlogit| %.3g, greedy %d tokens identical", filepath.Base(dir), len(g.Sequences), worst, len(g.Greedy))
}

// diagnoseInvFreq explains a common golden defect: a reference model cast
// to float16/bfloat16 (model.to(dtype)) and back (model.float()) keeps its
// rotary inv_freq buffer rounded to that dtype, so its RoPE angles drift with
// the position. If rounding our inv_freq the same way reproduces the golden,
// it says so.
func diagnoseInvFreq(m *Model, seq []int32, want []byte) string {
	be, ok := m.Backend().(*CPUBackend)
	if !ok || (m.Config.DType != "float16" && m.Config.DType != "bfloat16") {
		return ""
	}
	inv := be.InvFreq()
	saved := append([]float32(nil), inv...)
	defer copy(inv, saved)
	for i, f := range inv {
		if m.Config.DType == "float16" {
			inv[i] = safetensors.F16ToFloat32(safetensors.Float32ToF16(f))
		} else {
			inv[i] = safetensors.BF16ToFloat32(safetensors.Float32ToBF16(f))
		}
	}
	s := m.NewSequence()
	defer s.Free()
	lg, err := s.Forward(seq, nil, nil)
	if err != nil {
		return ""
	}
	var worst float64
	for i, v := range lg {
		worst = math.Max(worst, math.Abs(float64(v)-float64(math.Float32frombits(binary.LittleEndian.Uint32(want[4*i:])))))
	}
	if worst > 1e-4 {
		return ""
	}
	return fmt.Sprintf("\nWith RoPE inv_freq rounded to %s the engine matches this golden (max |Δ| %.2g): the reference ran with "+
		"a rounded inv_freq buffer (model.to(%s) ... model.float() in the golden script), which HF's from_pretrained(dtype=float32) "+
		"does not do. Regenerate the golden from a model reloaded with from_pretrained(dtype=torch.float32).", m.Config.DType, worst, m.Config.DType)
}

// greedyDecode runs n greedy steps without stopping at EOS.
func greedyDecode(t *testing.T, m *Model, prompt []int32, n int) []int32 {
	t.Helper()
	return manualGreedy(t, m, prompt, n)
}
