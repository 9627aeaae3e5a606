// Package gguf writes Llama-family Hugging Face checkpoints (config.json,
// safetensors, tokenizer.json) as GGUF v3 files that llama.cpp and the tools
// built on it (ollama, node-llama-cpp, LM Studio) load.
//
// What the export does beyond copying bytes:
//   - HF names become GGUF names (model.layers.N.self_attn.q_proj.weight ->
//     blk.N.attn_q.weight, ...); shapes are written innermost dimension first
//     (GGUF's ne order), so a row-major [out][in] matrix keeps its bytes.
//   - The rows of q_proj and k_proj are permuted from HF's rotary layout
//     (rotate_half: pairs (i, i+d/2) in each head) to GGUF's (pairs (2i, 2i+1)),
//     as llama.cpp's convert_hf_to_gguf.py does.
//   - The byte-level BPE tokenizer goes in as tokenizer.ggml.* (tokens, token
//     types, merges, special ids, add_bos_token, chat template). llama.cpp
//     only prepends BOS when add_bos_token says so; it does here.
//
// Supported: LlamaForCausalLM, default or linear RoPE, byte-level BPE
// tokenizers whose pre-tokenizer is GPT-2's or Llama 3's split. Anything else
// is an error naming what is unsupported.
package gguf

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/safetensors"
)

// ErrUnsupported is wrapped by errors about models or tokenizers the
// exporter cannot represent.
var ErrUnsupported = errors.New("gguf: unsupported")

// Type is the element type of exported matrices (norm vectors are always F32).
type Type uint32

// GGML tensor types used here.
const (
	F32 Type = 0
	F16 Type = 1
)

// ParseType maps "f16"/"f32" (also "float16", "float32") to a Type.
func ParseType(s string) (Type, error) {
	switch strings.ToLower(s) {
	case "f16", "float16", "fp16":
		return F16, nil
	case "f32", "float32", "fp32":
		return F32, nil
	}
	return 0, fmt.Errorf("gguf: type %q: want f16 or f32: %w", s, ErrUnsupported)
}

func (t Type) String() string {
	if t == F16 {
		return "f16"
	}
	return "f32"
}

// Alignment of the tensor data section and of every tensor in it.
const Alignment = 32

// GGUF metadata value types.
const (
	tUint32  = 4
	tInt32   = 5
	tFloat32 = 6
	tBool    = 7
	tString  = 8
	tArray   = 9
)

// Token types of tokenizer.ggml.token_type (llama.cpp's llama_token_type).
const (
	tokNormal      = 1
	tokControl     = 3
	tokUserDefined = 4
	tokUnused      = 5
)

type kv struct {
	key string
	val any // uint32, int32, float32, bool, string, []string, []int32
}

type tensor struct {
	name   string   // GGUF name
	src    string   // safetensors name
	ne     []uint64 // innermost first
	typ    Type
	permQK int // >0: permute rows for rotary layout with this many heads
	offset uint64
	nbytes uint64
}

// Stats describe a finished export.
type Stats struct {
	Tensors int
	Params  int64
	Bytes   int64
	Vocab   int
	Merges  int
}

// Export writes the model in dir as a GGUF file at out (written to a
// temporary file in the same directory and renamed on success).
func Export(dir, out string, typ Type) (Stats, error) {
	if typ != F16 && typ != F32 {
		return Stats{}, fmt.Errorf("gguf: type %d: %w", typ, ErrUnsupported)
	}
	cfg, err := engine.LoadConfig(dir)
	if err != nil {
		return Stats{}, fmt.Errorf("%s: %w", dir, err)
	}
	if cfg.QKVBias { // the "llama" GGUF architecture has no q/k/v biases
		return Stats{}, fmt.Errorf("%s: config.json: architectures %s: %w (LlamaForCausalLM is)", dir, cfg.Arch, ErrUnsupported)
	}
	switch cfg.RopeScaling.Type {
	case "", engine.RopeDefault, engine.RopeLinear:
	default:
		return Stats{}, fmt.Errorf("%s: config.json: rope_scaling %q: %w (default and linear are)", dir, cfg.RopeScaling.Type, ErrUnsupported)
	}
	tok, err := loadTokenizer(dir, cfg.VocabSize)
	if err != nil {
		return Stats{}, err
	}
	set, err := safetensors.OpenDir(dir)
	if err != nil {
		return Stats{}, fmt.Errorf("%s: %w", dir, err)
	}
	defer set.Close()

	tensors, err := plan(cfg, set, typ)
	if err != nil {
		return Stats{}, fmt.Errorf("%s: %w", dir, err)
	}
	meta := metadata(cfg, tok, typ, filepath.Base(filepath.Clean(dir)))

	f, err := os.CreateTemp(filepath.Dir(out), ".gguf-*")
	if err != nil {
		return Stats{}, err
	}
	tmp := f.Name()
	defer func() {
		if tmp != "" {
			f.Close()
			os.Remove(tmp)
		}
	}()
	bw := bufio.NewWriterSize(f, 1<<20)
	cw := &countWriter{w: bw}
	if err := writeHeader(cw, meta, tensors); err != nil {
		return Stats{}, err
	}
	st := Stats{Tensors: len(tensors), Vocab: len(tok.tokens), Merges: len(tok.merges)}
	for i := range tensors {
		t := &tensors[i]
		if err := pad(cw, Alignment); err != nil {
			return Stats{}, err
		}
		data, _, err := set.ReadFloat32(t.src)
		if err != nil {
			return Stats{}, fmt.Errorf("%s: tensor %q: %w", dir, t.src, err)
		}
		if t.permQK > 0 {
			data = PermuteRotary(data, int(t.ne[1]), int(t.ne[0]), t.permQK)
		}
		st.Params += int64(len(data))
		if err := writeData(cw, data, t.typ); err != nil {
			return Stats{}, err
		}
	}
	if err := bw.Flush(); err != nil {
		return Stats{}, err
	}
	if err := f.Sync(); err != nil {
		return Stats{}, err
	}
	if err := f.Close(); err != nil {
		return Stats{}, err
	}
	if err := os.Rename(tmp, out); err != nil {
		return Stats{}, err
	}
	tmp = ""
	st.Bytes = cw.n
	return st, nil
}

// PermuteRotary reorders the rows of a [rows][cols] projection (q_proj or
// k_proj with heads heads) from HF's rotate_half layout to GGUF's
// interleaved one: in each head of d rows, output row 2i+j is input row
// j*d/2+i (j in {0,1}). It returns a new slice.
func PermuteRotary(w []float32, rows, cols, heads int) []float32 {
	d := rows / heads
	out := make([]float32, len(w))
	for h := 0; h < heads; h++ {
		for i := 0; i < d/2; i++ {
			for j := 0; j < 2; j++ {
				dst := h*d + 2*i + j
				src := h*d + j*(d/2) + i
				copy(out[dst*cols:(dst+1)*cols], w[src*cols:(src+1)*cols])
			}
		}
	}
	return out
}

// plan lists the tensors to write with GGUF names, shapes, types and
// offsets, checking every source tensor against cfg.
func plan(cfg engine.Config, set *safetensors.Set, typ Type) ([]tensor, error) {
	h, inter, q, kvd, v := uint64(cfg.HiddenSize), uint64(cfg.IntermediateSize), uint64(cfg.QDim()), uint64(cfg.KVDim()), uint64(cfg.VocabSize)
	var ts []tensor
	add := func(name, src string, typ Type, perm int, ne ...uint64) {
		ts = append(ts, tensor{name: name, src: src, ne: ne, typ: typ, permQK: perm})
	}
	add("token_embd.weight", "model.embed_tokens.weight", typ, 0, h, v)
	for i := 0; i < cfg.NumLayers; i++ {
		p, b := fmt.Sprintf("model.layers.%d.", i), fmt.Sprintf("blk.%d.", i)
		add(b+"attn_norm.weight", p+"input_layernorm.weight", F32, 0, h)
		add(b+"attn_q.weight", p+"self_attn.q_proj.weight", typ, cfg.NumHeads, h, q)
		add(b+"attn_k.weight", p+"self_attn.k_proj.weight", typ, cfg.NumKVHeads, h, kvd)
		add(b+"attn_v.weight", p+"self_attn.v_proj.weight", typ, 0, h, kvd)
		add(b+"attn_output.weight", p+"self_attn.o_proj.weight", typ, 0, q, h)
		add(b+"ffn_norm.weight", p+"post_attention_layernorm.weight", F32, 0, h)
		add(b+"ffn_gate.weight", p+"mlp.gate_proj.weight", typ, 0, h, inter)
		add(b+"ffn_up.weight", p+"mlp.up_proj.weight", typ, 0, h, inter)
		add(b+"ffn_down.weight", p+"mlp.down_proj.weight", typ, 0, inter, h)
	}
	add("output_norm.weight", "model.norm.weight", F32, 0, h)
	if !cfg.TieWordEmbeddings {
		add("output.weight", "lm_head.weight", typ, 0, h, v)
	}
	var off uint64
	for i := range ts {
		t := &ts[i]
		info, ok := set.Info(t.src)
		if !ok {
			return nil, fmt.Errorf("tensor %q: missing: %w", t.src, engine.ErrBadWeights)
		}
		if !info.DType.Float() {
			return nil, fmt.Errorf("tensor %q: dtype %s: %w", t.src, info.DType, ErrUnsupported)
		}
		want := make([]int64, len(t.ne))
		n := uint64(1)
		for k, d := range t.ne {
			want[len(t.ne)-1-k] = int64(d)
			n *= d
		}
		if !equal(info.Shape, want) {
			return nil, fmt.Errorf("tensor %q: shape %v, want %v: %w", t.src, info.Shape, want, engine.ErrBadWeights)
		}
		t.nbytes = n * 4
		if t.typ == F16 {
			t.nbytes = n * 2
		}
		off = alignUp(off, Alignment)
		t.offset = off
		off += t.nbytes
	}
	return ts, nil
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func alignUp(n, a uint64) uint64 { return (n + a - 1) / a * a }

func metadata(cfg engine.Config, tok *vocab, typ Type, name string) []kv {
	fileType := uint32(0) // LLAMA_FTYPE_ALL_F32
	if typ == F16 {
		fileType = 1 // LLAMA_FTYPE_MOSTLY_F16
	}
	m := []kv{
		{"general.architecture", "llama"},
		{"general.name", name},
		{"general.file_type", fileType},
		{"general.alignment", uint32(Alignment)},
		{"llama.vocab_size", uint32(cfg.VocabSize)},
		{"llama.context_length", uint32(cfg.MaxPositions)},
		{"llama.embedding_length", uint32(cfg.HiddenSize)},
		{"llama.block_count", uint32(cfg.NumLayers)},
		{"llama.feed_forward_length", uint32(cfg.IntermediateSize)},
		{"llama.rope.dimension_count", uint32(cfg.HeadDim)},
		{"llama.rope.freq_base", float32(cfg.RopeTheta)},
		{"llama.attention.head_count", uint32(cfg.NumHeads)},
		{"llama.attention.head_count_kv", uint32(cfg.NumKVHeads)},
		{"llama.attention.key_length", uint32(cfg.HeadDim)},
		{"llama.attention.value_length", uint32(cfg.HeadDim)},
		{"llama.attention.layer_norm_rms_epsilon", float32(cfg.RMSNormEps)},
	}
	if cfg.RopeScaling.Type == engine.RopeLinear {
		m = append(m, kv{"llama.rope.scaling.type", "linear"}, kv{"llama.rope.scaling.factor", float32(cfg.RopeScaling.Factor)})
	}
	m = append(m,
		kv{"tokenizer.ggml.model", "gpt2"},
		kv{"tokenizer.ggml.pre", tok.pre},
		kv{"tokenizer.ggml.tokens", tok.tokens},
		kv{"tokenizer.ggml.token_type", tok.types},
		kv{"tokenizer.ggml.merges", tok.merges},
		kv{"tokenizer.ggml.add_bos_token", tok.addBOS},
		kv{"tokenizer.ggml.add_eos_token", false},
	)
	bos := tok.bos
	if bos < 0 && cfg.BOS >= 0 {
		bos = cfg.BOS
	}
	if bos >= 0 {
		m = append(m, kv{"tokenizer.ggml.bos_token_id", uint32(bos)})
	}
	eos := tok.eos
	if eos < 0 && len(cfg.EOS) > 0 {
		eos = cfg.EOS[0]
	}
	if eos >= 0 {
		m = append(m, kv{"tokenizer.ggml.eos_token_id", uint32(eos)})
	}
	if tok.pad >= 0 {
		m = append(m, kv{"tokenizer.ggml.padding_token_id", uint32(tok.pad)})
	}
	if tok.template != "" {
		m = append(m, kv{"tokenizer.chat_template", tok.template})
	}
	return m
}

// vocab is the tokenizer part of the GGUF metadata.
type vocab struct {
	pre            string
	tokens         []string
	types          []int32
	merges         []string
	bos, eos, pad  int32
	addBOS         bool
	template       string
	specialByToken map[string]int32
}

// Pre-tokenizer regexes llama.cpp knows by name (tokenizer.ggml.pre).
const (
	llama3Split = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// maxTokenizerBytes bounds tokenizer.json and tokenizer_config.json.
const maxTokenizerBytes = 64 << 20

func readJSON(path string, v any) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxTokenizerBytes+1))
	if err != nil {
		return err
	}
	if len(data) > maxTokenizerBytes {
		return fmt.Errorf("%s: larger than %d bytes", path, maxTokenizerBytes)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func loadTokenizer(dir string, vocabSize int) (*vocab, error) {
	var tj struct {
		AddedTokens []struct {
			ID      int    `json:"id"`
			Content string `json:"content"`
			Special bool   `json:"special"`
		} `json:"added_tokens"`
		PreTokenizer json.RawMessage `json:"pre_tokenizer"`
		Model        struct {
			Type         string          `json:"type"`
			Vocab        map[string]int  `json:"vocab"`
			Merges       json.RawMessage `json:"merges"`
			ByteFallback bool            `json:"byte_fallback"`
		} `json:"model"`
	}
	tpath := filepath.Join(dir, "tokenizer.json")
	if err := readJSON(tpath, &tj); err != nil {
		return nil, err
	}
	bad := func(field, format string, a ...any) error {
		return fmt.Errorf("%s: %s: %s: %w", tpath, field, fmt.Sprintf(format, a...), ErrUnsupported)
	}
	if tj.Model.Type != "BPE" || tj.Model.ByteFallback {
		return nil, bad("model", "type %q byte_fallback %v (want byte-level BPE; SentencePiece-style vocabularies need llama.cpp's convert_hf_to_gguf.py)", tj.Model.Type, tj.Model.ByteFallback)
	}
	pre, err := preName(tj.PreTokenizer)
	if err != nil {
		return nil, fmt.Errorf("%s: pre_tokenizer: %w", tpath, err)
	}
	v := &vocab{pre: pre, bos: -1, eos: -1, pad: -1, specialByToken: map[string]int32{}}
	n := vocabSize
	for _, id := range tj.Model.Vocab {
		n = max(n, id+1)
	}
	for _, a := range tj.AddedTokens {
		n = max(n, a.ID+1)
	}
	if n > vocabSize {
		return nil, bad("model.vocab", "ids up to %d exceed config.json vocab_size %d", n-1, vocabSize)
	}
	v.tokens = make([]string, n)
	v.types = make([]int32, n)
	for i := range v.tokens {
		v.tokens[i] = fmt.Sprintf("[PAD%d]", i)
		v.types[i] = tokUnused
	}
	for s, id := range tj.Model.Vocab {
		if id < 0 {
			return nil, bad("model.vocab", "negative id %d for %q", id, s)
		}
		v.tokens[id] = s
		v.types[id] = tokNormal
	}
	for _, a := range tj.AddedTokens {
		if a.ID < 0 {
			return nil, bad("added_tokens", "negative id %d", a.ID)
		}
		v.tokens[a.ID] = a.Content
		v.types[a.ID] = tokUserDefined
		if a.Special {
			v.types[a.ID] = tokControl
			v.specialByToken[a.Content] = int32(a.ID)
		}
	}
	// Merges: ["a b", ...] or [["a","b"], ...].
	var asStrings []string
	if err := json.Unmarshal(tj.Model.Merges, &asStrings); err == nil {
		v.merges = asStrings
	} else {
		var pairs [][2]string
		if err := json.Unmarshal(tj.Model.Merges, &pairs); err != nil {
			return nil, bad("model.merges", "neither strings nor pairs: %v", err)
		}
		v.merges = make([]string, len(pairs))
		for i, p := range pairs {
			if strings.Contains(p[0], " ") || strings.Contains(p[1], " ") {
				return nil, bad("model.merges", "pair %d %q contains a space, which GGUF's \"a b\" form cannot hold", i, p)
			}
			v.merges[i] = p[0] + " " + p[1]
		}
	}

	var tc struct {
		BOS          json.RawMessage `json:"bos_token"`
		EOS          json.RawMessage `json:"eos_token"`
		PAD          json.RawMessage `json:"pad_token"`
		AddBOS       *bool           `json:"add_bos_token"`
		ChatTemplate json.RawMessage `json:"chat_template"`
	}
	cpath := filepath.Join(dir, "tokenizer_config.json")
	if err := readJSON(cpath, &tc); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	v.bos = v.specialID(tc.BOS)
	v.eos = v.specialID(tc.EOS)
	v.pad = v.specialID(tc.PAD)
	// add_bos_token: explicit, else whatever tokenizer.json's post-processor
	// prepends (TemplateProcessing starting with BOS).
	if tc.AddBOS != nil {
		v.addBOS = *tc.AddBOS
	} else if v.bos >= 0 {
		var raw map[string]json.RawMessage
		if readJSON(tpath, &raw) == nil {
			v.addBOS = strings.Contains(string(raw["post_processor"]), fmt.Sprintf("%q", v.tokens[v.bos]))
		}
	}
	if len(tc.ChatTemplate) > 0 {
		var s string
		if json.Unmarshal(tc.ChatTemplate, &s) == nil {
			v.template = s
		}
	}
	return v, nil
}

// specialID resolves a tokenizer_config.json token field (a string or an
// AddedToken object with "content"); -1 when absent or unknown.
func (v *vocab) specialID(raw json.RawMessage) int32 {
	if len(raw) == 0 || string(raw) == "null" {
		return -1
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		var o struct {
			Content string `json:"content"`
		}
		if json.Unmarshal(raw, &o) != nil {
			return -1
		}
		s = o.Content
	}
	if id, ok := v.specialByToken[s]; ok {
		return id
	}
	for i, t := range v.tokens {
		if t == s {
			return int32(i)
		}
	}
	return -1
}

// preName maps tokenizer.json's pre_tokenizer to llama.cpp's
// tokenizer.ggml.pre: Llama 3's split regex + ByteLevel(use_regex=false) is
// "llama-bpe"; a bare ByteLevel with use_regex (GPT-2's regex) is "gpt2".
func preName(raw json.RawMessage) (string, error) {
	type node struct {
		Type          string `json:"type"`
		UseRegex      *bool  `json:"use_regex"`
		AddPrefixSpac bool   `json:"add_prefix_space"`
		Pattern       struct {
			Regex  string `json:"Regex"`
			String string `json:"String"`
		} `json:"pattern"`
		Behavior      string `json:"behavior"`
		PreTokenizers []node `json:"pretokenizers"`
	}
	var n node
	if err := json.Unmarshal(raw, &n); err != nil {
		return "", fmt.Errorf("%v: %w", err, ErrUnsupported)
	}
	list := []node{n}
	if n.Type == "Sequence" {
		list = n.PreTokenizers
	}
	switch {
	case len(list) == 2 && list[0].Type == "Split" && list[0].Pattern.Regex == llama3Split &&
		list[1].Type == "ByteLevel" && list[1].UseRegex != nil && !*list[1].UseRegex && !list[1].AddPrefixSpac:
		return "llama-bpe", nil
	case len(list) == 1 && list[0].Type == "ByteLevel" && (list[0].UseRegex == nil || *list[0].UseRegex) && !list[0].AddPrefixSpac:
		return "gpt2", nil
	}
	return "", fmt.Errorf("pre-tokenizer %s: %w (llama.cpp names only known splits; GPT-2's and Llama 3's are exported)", summarize(raw), ErrUnsupported)
}

func summarize(raw json.RawMessage) string {
	s := string(raw)
	if len(s) > 120 {
		s = s[:120] + "..."
	}
	return s
}

// --- binary encoding ---

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func pad(w *countWriter, a int64) error {
	if r := w.n % a; r != 0 {
		_, err := w.Write(make([]byte, a-r))
		return err
	}
	return nil
}

type enc struct {
	w   io.Writer
	err error
	b   [8]byte
}

func (e *enc) u32(v uint32) {
	if e.err == nil {
		binary.LittleEndian.PutUint32(e.b[:4], v)
		_, e.err = e.w.Write(e.b[:4])
	}
}

func (e *enc) u64(v uint64) {
	if e.err == nil {
		binary.LittleEndian.PutUint64(e.b[:], v)
		_, e.err = e.w.Write(e.b[:])
	}
}

func (e *enc) str(s string) {
	e.u64(uint64(len(s)))
	if e.err == nil {
		_, e.err = io.WriteString(e.w, s)
	}
}

func (e *enc) value(v any) {
	switch x := v.(type) {
	case uint32:
		e.u32(tUint32)
		e.u32(x)
	case int32:
		e.u32(tInt32)
		e.u32(uint32(x))
	case float32:
		e.u32(tFloat32)
		e.u32(math.Float32bits(x))
	case bool:
		e.u32(tBool)
		b := byte(0)
		if x {
			b = 1
		}
		if e.err == nil {
			_, e.err = e.w.Write([]byte{b})
		}
	case string:
		e.u32(tString)
		e.str(x)
	case []string:
		e.u32(tArray)
		e.u32(tString)
		e.u64(uint64(len(x)))
		for _, s := range x {
			e.str(s)
		}
	case []int32:
		e.u32(tArray)
		e.u32(tInt32)
		e.u64(uint64(len(x)))
		for _, i := range x {
			e.u32(uint32(i))
		}
	default:
		e.err = fmt.Errorf("gguf: metadata value of type %T", v)
	}
}

func writeHeader(w *countWriter, meta []kv, ts []tensor) error {
	keys := map[string]bool{}
	for _, m := range meta {
		if keys[m.key] {
			return fmt.Errorf("gguf: duplicate metadata key %q", m.key)
		}
		keys[m.key] = true
	}
	e := &enc{w: w}
	e.u32(0x46554747) // "GGUF"
	e.u32(3)
	e.u64(uint64(len(ts)))
	e.u64(uint64(len(meta)))
	for _, m := range meta {
		e.str(m.key)
		e.value(m.val)
	}
	for _, t := range ts {
		e.str(t.name)
		e.u32(uint32(len(t.ne)))
		for _, d := range t.ne {
			e.u64(d)
		}
		e.u32(uint32(t.typ))
		e.u64(t.offset)
	}
	return e.err
}

func writeData(w io.Writer, data []float32, typ Type) error {
	const chunk = 1 << 16
	buf := make([]byte, 0, chunk*4)
	for len(data) > 0 {
		n := min(len(data), chunk)
		buf = buf[:0]
		for _, x := range data[:n] {
			if typ == F16 {
				buf = binary.LittleEndian.AppendUint16(buf, safetensors.Float32ToF16(x))
			} else {
				buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(x))
			}
		}
		if _, err := w.Write(buf); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}
