package gguf

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/safetensors"
)

const shippedTarget = "../../models/specgate-target"

// nodePeers returns the folder with node-llama-cpp installed (tools/node,
// filled by scripts/node-peers.sh) or skips the test saying why.
func nodePeers(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node not on PATH: llama.cpp (npm node-llama-cpp) is the reference; install Node.js and run scripts/node-peers.sh")
	}
	dir, err := filepath.Abs("../../tools/node")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "node-llama-cpp", "package.json")); err != nil {
		t.Skip("tools/node/node_modules/node-llama-cpp missing: run scripts/node-peers.sh (npm install, cached)")
	}
	return dir
}

type llamaOut struct {
	Tokenized []int32        `json:"tokenized"`
	Generated []int32        `json:"generated"`
	Top       [][][2]float64 `json:"top"` // per generated token: 5 best [id, p]
	BOS       int32          `json:"bos"`
	EOS       int32          `json:"eos"`
}

func runLlama(t *testing.T, peers, model, text string, ids []int32, n int) llamaOut {
	t.Helper()
	in, _ := json.Marshal(map[string]any{"model": model, "text": text, "ids": ids, "n": n})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "llama_greedy.mjs")
	cmd.Dir = peers
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("llama.cpp (node llama_greedy.mjs): %v\n%s", err, stderr.String())
	}
	var r llamaOut
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("llama.cpp output %q: %v", out, err)
	}
	return r
}

// TestLlamaCppGreedyMatches exports the shipped target as f32 and f16 GGUF
// files, loads them in llama.cpp (the independent reference) and checks
// that llama.cpp tokenizes the prompts as our tokenizer does and continues
// them with our engine's greedy tokens. Where the two pick different tokens
// the step must be a numerical tie in llama.cpp's own distribution (our
// token within tieTol of its best token's probability, relative); llama.cpp
// is then restarted from our tokens so that the whole continuation is
// checked. Ties are logged and counted; a layout or tokenizer error shows
// as a wide gap at the first token.
func TestLlamaCppGreedyMatches(t *testing.T) {
	peers := nodePeers(t)
	m, err := engine.Load(shippedTarget, engine.LoadOptions{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	e := engine.New(m, engine.Options{})
	defer e.Close()
	prompts := []string{
		"func main() {",
		"The history of the city begins",
		"<|im_start|>user\nWhat does ephemeral mean?<|im_end|>\n<|im_start|>assistant\n",
		"def fib(n):\n    if n < 2:\n        return n\n",
		"Numbers: 12345 and 3.14159, émigré café — done.",
	}
	const n = 32
	// f32 weights: llama.cpp accumulates in another order than we do;
	// f16: llama.cpp also rounds activations to f16 before each matmul.
	tieTol := map[Type]float64{F32: 1e-3, F16: 2e-2}
	for _, typ := range []Type{F32, F16} {
		out := filepath.Join(t.TempDir(), "target-"+typ.String()+".gguf")
		if _, err := Export(shippedTarget, out, typ); err != nil {
			t.Fatal(err)
		}
		exact, ties := 0, 0
		for _, p := range prompts {
			ids := m.Tokenizer.Encode(p, true)
			if bos, ok := m.Tokenizer.BOS(); !ok || ids[0] != bos {
				t.Fatalf("%q: our encoding %v does not start with BOS", p, ids)
			}
			var ours []int32
			res, err := e.Generate(context.Background(), engine.GenerateRequest{Prompt: ids, MaxTokens: n},
				func(c engine.Chunk) error { ours = append(ours, c.Tokens...); return nil })
			if err != nil {
				t.Fatal(err)
			}
			ref := runLlama(t, peers, out, p, ids, n)
			if !slices.Equal(ref.Tokenized, ids) {
				t.Errorf("%s %q: llama.cpp tokenizes as %v, we as %v", typ, p, ref.Tokenized, ids)
			}
			promptTies := 0
			for done := 0; done < len(ours); {
				// ref continues ids+ours[:done]; compare from there.
				k := 0
				for k < len(ref.Generated) && done+k < len(ours) && ref.Generated[k] == ours[done+k] {
					k++
				}
				done += k
				if done == len(ours) {
					break
				}
				if k == len(ref.Generated) {
					t.Fatalf("%s %q: llama.cpp stopped after %d tokens", typ, p, done)
				}
				var pBest, pOurs float64
				for _, c := range ref.Top[k] {
					if int32(c[0]) == ref.Generated[k] {
						pBest = c[1]
					}
					if int32(c[0]) == ours[done] {
						pOurs = c[1]
					}
				}
				if pBest == 0 || pBest-pOurs > tieTol[typ]*pBest {
					t.Errorf("%s %q: token %d: llama.cpp picks %d (p=%.5f), we pick %d (p=%.5f in llama.cpp); not a tie\n llama.cpp %v\n specgate  %v",
						typ, p, done, ref.Generated[k], pBest, ours[done], pOurs, ref.Generated, ours[done-k:])
					break
				}
				t.Logf("%s %q: token %d is a tie in llama.cpp: %d p=%.6f vs ours %d p=%.6f", typ, p, done, ref.Generated[k], pBest, ours[done], pOurs)
				promptTies++
				done++
				ref = runLlama(t, peers, out, p, append(slices.Clone(ids), ours[:done]...), n-done)
			}
			if len(ours) < n { // we stopped at an EOS: llama.cpp must produce one next
				ref = runLlama(t, peers, out, p, append(slices.Clone(ids), ours...), 1)
				if res.Finish != engine.FinishStop || len(ref.Generated) == 0 || !slices.Contains(m.Config.EOS, ref.Generated[0]) {
					t.Errorf("%s %q: we stopped after %d tokens (%s), llama.cpp went on with %v", typ, p, len(ours), res.Finish, ref.Generated)
				}
			}
			if promptTies == 0 {
				exact++
			}
			ties += promptTies
			t.Logf("%s %q: %d prompt tokens, %d greedy tokens, %d ties", typ, p, len(ids), len(ours), promptTies)
		}
		t.Logf("%s: %d of %d prompts identical to llama.cpp token for token; %d tie steps elsewhere", typ, exact, len(prompts), ties)
	}
}

// TestPermuteRotary checks the row permutation against the definition in
// llama.cpp's convert_hf_to_gguf.py (reshape(h, 2, d/2, cols).swapaxes(1, 2)),
// written out by hand for 2 heads of dimension 4.
func TestPermuteRotary(t *testing.T) {
	const heads, d, cols = 2, 4, 3
	w := make([]float32, heads*d*cols)
	for r := 0; r < heads*d; r++ {
		for c := 0; c < cols; c++ {
			w[r*cols+c] = float32(100*r + c)
		}
	}
	got := PermuteRotary(w, heads*d, cols, heads)
	// Head 0 rows (0,1,2,3) -> (0,2,1,3); head 1 rows (4,5,6,7) -> (4,6,5,7).
	wantRows := []int{0, 2, 1, 3, 4, 6, 5, 7}
	for r, src := range wantRows {
		for c := 0; c < cols; c++ {
			if got[r*cols+c] != float32(100*src+c) {
				t.Fatalf("row %d col %d = %v, want row %d's %v", r, c, got[r*cols+c], src, float32(100*src+c))
			}
		}
	}
}

// TestFileLayout reads the f32 export back with a minimal GGUF parser
// written from the format's specification and checks the header, the
// metadata llama.cpp needs, the tensor directory and one tensor's bytes.
func TestFileLayout(t *testing.T) {
	out := filepath.Join(t.TempDir(), "t.gguf")
	st, err := Export(shippedTarget, out, F32)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(data)) != st.Bytes {
		t.Fatalf("file %d bytes, Stats.Bytes %d", len(data), st.Bytes)
	}
	r := &reader{b: data}
	if magic := r.u32(); magic != 0x46554747 {
		t.Fatalf("magic %#x", magic)
	}
	if v := r.u32(); v != 3 {
		t.Fatalf("version %d", v)
	}
	nt, nkv := r.u64(), r.u64()
	meta := map[string]any{}
	for i := uint64(0); i < nkv; i++ {
		k := r.str()
		meta[k] = r.value(r.u32())
	}
	type info struct {
		ne  []uint64
		typ uint32
		off uint64
	}
	infos := map[string]info{}
	for i := uint64(0); i < nt; i++ {
		name := r.str()
		nd := r.u32()
		var in info
		for j := uint32(0); j < nd; j++ {
			in.ne = append(in.ne, r.u64())
		}
		in.typ, in.off = r.u32(), r.u64()
		infos[name] = in
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	dataStart := alignUp(uint64(r.off), Alignment)
	for k, want := range map[string]any{
		"general.architecture": "llama", "llama.block_count": uint32(6), "llama.embedding_length": uint32(384),
		"llama.attention.head_count": uint32(6), "llama.attention.head_count_kv": uint32(2),
		"llama.rope.freq_base": float32(10000), "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "llama-bpe",
		"tokenizer.ggml.bos_token_id": uint32(0), "tokenizer.ggml.eos_token_id": uint32(3), "tokenizer.ggml.add_bos_token": true,
	} {
		if meta[k] != want {
			t.Errorf("%s = %v (%T), want %v", k, meta[k], meta[k], want)
		}
	}
	if toks, _ := meta["tokenizer.ggml.tokens"].([]string); len(toks) != 8192 || toks[0] != "<|begin_of_text|>" || toks[285] != "Ġthe" {
		t.Errorf("tokens: %d entries", len(toks))
	}
	if len(infos) != 2+9*6 {
		t.Errorf("%d tensors", len(infos))
	}
	if _, ok := infos["output.weight"]; ok {
		t.Error("output.weight written for a model with tied embeddings")
	}
	// blk.0.attn_k.weight: [kvdim=128][384] permuted; compare with the
	// safetensors rows directly: GGUF row 2i+j of head h = HF row h*64 + j*32 + i.
	in := infos["blk.0.attn_k.weight"]
	if !slices.Equal(in.ne, []uint64{384, 128}) || in.typ != 0 {
		t.Fatalf("attn_k: ne %v type %d", in.ne, in.typ)
	}
	set, err := safetensors.OpenDir(shippedTarget)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	hf, _, err := set.ReadFloat32("model.layers.0.self_attn.k_proj.weight")
	if err != nil {
		t.Fatal(err)
	}
	base := dataStart + in.off
	for _, c := range [][3]int{{0, 0, 0}, {0, 1, 0}, {0, 5, 1}, {1, 31, 1}, {1, 7, 0}} {
		h, i, j := c[0], c[1], c[2]
		ggufRow, hfRow := h*64+2*i+j, h*64+j*32+i
		for col := 0; col < 384; col += 97 {
			got := math.Float32frombits(binary.LittleEndian.Uint32(data[base+uint64(4*(ggufRow*384+col)):]))
			if want := hf[hfRow*384+col]; got != want {
				t.Fatalf("attn_k row %d col %d = %v, want HF row %d: %v", ggufRow, col, got, hfRow, want)
			}
		}
	}
}

func TestUnsupported(t *testing.T) {
	if _, err := ParseType("q4_0"); !errors.Is(err, ErrUnsupported) {
		t.Errorf("ParseType(q4_0) = %v", err)
	}
	dir := t.TempDir()
	for _, f := range []string{"config.json", "model.safetensors", "tokenizer_config.json"} {
		b, err := os.ReadFile(filepath.Join(shippedTarget, f))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, f), b, 0o644)
	}
	var tj map[string]any
	b, _ := os.ReadFile(filepath.Join(shippedTarget, "tokenizer.json"))
	json.Unmarshal(b, &tj)
	tj["pre_tokenizer"] = map[string]any{"type": "Metaspace", "replacement": "▁"}
	b, _ = json.Marshal(tj)
	os.WriteFile(filepath.Join(dir, "tokenizer.json"), b, 0o644)
	_, err := Export(dir, filepath.Join(dir, "x.gguf"), F16)
	if !errors.Is(err, ErrUnsupported) {
		t.Fatalf("Metaspace pre-tokenizer: err = %v, want ErrUnsupported", err)
	}
	if _, statErr := os.Stat(filepath.Join(dir, "x.gguf")); statErr == nil {
		t.Error("a failed export left its output file")
	}
	// Qwen2 (q/k/v biases) has no place in the "llama" GGUF architecture.
	_, err = Export("../testdata/hf/rand-qwen2", filepath.Join(dir, "q.gguf"), F16)
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "Qwen2ForCausalLM") {
		t.Fatalf("Qwen2 export: err = %v, want ErrUnsupported naming the architecture", err)
	}
}

type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) take(n int) []byte {
	if r.err != nil || r.off+n > len(r.b) || n < 0 {
		if r.err == nil {
			r.err = errors.New("truncated")
		}
		return make([]byte, max(n, 0))
	}
	s := r.b[r.off : r.off+n]
	r.off += n
	return s
}
func (r *reader) u32() uint32 { return binary.LittleEndian.Uint32(r.take(4)) }
func (r *reader) u64() uint64 { return binary.LittleEndian.Uint64(r.take(8)) }
func (r *reader) str() string { return string(r.take(int(r.u64()))) }

func (r *reader) value(typ uint32) any {
	switch typ {
	case tUint32:
		return r.u32()
	case tInt32:
		return int32(r.u32())
	case tFloat32:
		return math.Float32frombits(r.u32())
	case tBool:
		return r.take(1)[0] != 0
	case tString:
		return r.str()
	case tArray:
		et, n := r.u32(), r.u64()
		if et == tString {
			out := make([]string, 0, n)
			for i := uint64(0); i < n && r.err == nil; i++ {
				out = append(out, r.str())
			}
			return out
		}
		out := make([]any, 0, n)
		for i := uint64(0); i < n && r.err == nil; i++ {
			out = append(out, r.value(et))
		}
		return out
	}
	r.err = errors.New("unknown value type")
	return nil
}
