package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
)

// MaxConfigSize bounds config.json and generation_config.json (bytes).
const MaxConfigSize = 1 << 20

// Limits on config values, so that a hostile config cannot drive huge allocations.
const (
	maxHidden     = 1 << 16
	maxLayers     = 1 << 10
	maxHeads      = 1 << 10
	maxVocab      = 1 << 22
	maxPositions  = 1 << 22
	maxHeadDim    = 1 << 10
	maxIntermedia = 1 << 18
)

// Rope scaling types (Config.RopeScaling.Type).
const (
	RopeDefault = "default"
	RopeLinear  = "linear"
	RopeLlama3  = "llama3"
)

// RopeScaling is config.json's rope_scaling. Type is RopeDefault when absent.
type RopeScaling struct {
	Type                          string
	Factor                        float64 // linear and llama3
	LowFreqFactor, HighFreqFactor float64 // llama3
	OriginalMaxPositions          int     // llama3: original_max_position_embeddings
}

// Config is the validated architecture of a model (one registered with
// Register: LlamaForCausalLM, Qwen2ForCausalLM), merged with
// generation_config.json (EOS ids and sampling defaults).
type Config struct {
	// Arch is the registered architecture name; "" (configs built by hand)
	// means LlamaForCausalLM.
	Arch string
	// QKVBias: the q, k and v projections add a bias (Qwen2). Backends read
	// the features from here, not from Arch.
	QKVBias bool

	HiddenSize        int
	IntermediateSize  int
	NumLayers         int
	NumHeads          int
	NumKVHeads        int
	HeadDim           int
	RMSNormEps        float64
	RopeTheta         float64
	RopeScaling       RopeScaling
	MaxPositions      int
	TieWordEmbeddings bool
	VocabSize         int
	BOS               int32   // -1 when none
	EOS               []int32 // union of config.json and generation_config.json eos ids
	DType             string  // torch_dtype / dtype as written ("float16", "bfloat16", "float32"); informational

	// Defaults from generation_config.json (zero when absent).
	DefaultTemperature float32
	DefaultTopP        float32
	DefaultTopK        int
}

// QDim is NumHeads*HeadDim, KVDim is NumKVHeads*HeadDim.
func (c Config) QDim() int  { return c.NumHeads * c.HeadDim }
func (c Config) KVDim() int { return c.NumKVHeads * c.HeadDim }

// rawConfig mirrors config.json; pointers tell "absent" from zero.
type rawConfig struct {
	Architectures         []string        `json:"architectures"`
	ModelType             string          `json:"model_type"`
	HiddenSize            *int            `json:"hidden_size"`
	IntermediateSize      *int            `json:"intermediate_size"`
	NumHiddenLayers       *int            `json:"num_hidden_layers"`
	NumAttentionHeads     *int            `json:"num_attention_heads"`
	NumKeyValueHeads      *int            `json:"num_key_value_heads"`
	HeadDim               *int            `json:"head_dim"`
	RMSNormEps            *float64        `json:"rms_norm_eps"`
	RopeTheta             *float64        `json:"rope_theta"`
	RopeScaling           json.RawMessage `json:"rope_scaling"`
	RopeParameters        json.RawMessage `json:"rope_parameters"`
	MaxPositionEmbeddings *int            `json:"max_position_embeddings"`
	TieWordEmbeddings     *bool           `json:"tie_word_embeddings"`
	VocabSize             *int            `json:"vocab_size"`
	BOSTokenID            json.RawMessage `json:"bos_token_id"`
	EOSTokenID            json.RawMessage `json:"eos_token_id"`
	TorchDType            string          `json:"torch_dtype"`
	DType                 string          `json:"dtype"`
	AttentionBias         *bool           `json:"attention_bias"`
	MLPBias               *bool           `json:"mlp_bias"`
	HiddenAct             string          `json:"hidden_act"`
	PretrainingTP         *int            `json:"pretraining_tp"`
}

type rawRope struct {
	RopeType                      string   `json:"rope_type"`
	Type                          string   `json:"type"`
	Factor                        *float64 `json:"factor"`
	LowFreqFactor                 *float64 `json:"low_freq_factor"`
	HighFreqFactor                *float64 `json:"high_freq_factor"`
	OriginalMaxPositionEmbeddings *int     `json:"original_max_position_embeddings"`
	RopeTheta                     *float64 `json:"rope_theta"`
}

// ParseConfig parses config.json bytes. file names the file in errors.
// Errors wrap ErrBadConfig and name file and field.
func ParseConfig(data []byte, file string) (Config, error) {
	bad := func(field, format string, a ...any) error {
		return fmt.Errorf("%s: %s: %s: %w", file, field, fmt.Sprintf(format, a...), ErrBadConfig)
	}
	if len(data) > MaxConfigSize {
		return Config{}, bad("(file)", "%d bytes exceeds limit %d", len(data), MaxConfigSize)
	}
	var r rawConfig
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&r); err != nil {
		return Config{}, fmt.Errorf("%s: %v: %w", file, err, ErrBadConfig)
	}
	arch, err := archFor(r.Architectures, r.ModelType)
	switch {
	case err != nil:
		return Config{}, bad("model_type", "%v", err)
	case arch == nil && len(r.Architectures) > 0:
		return Config{}, bad("architectures", "%q unsupported (%s)", r.Architectures, wantArchs())
	case arch == nil && r.ModelType != "":
		return Config{}, bad("model_type", "%q unsupported (%s)", r.ModelType, wantArchs())
	case arch == nil:
		return Config{}, bad("architectures", "missing (%s)", wantArchs())
	}
	if r.HiddenAct != "" && r.HiddenAct != "silu" {
		return Config{}, bad("hidden_act", "%q unsupported (want silu)", r.HiddenAct)
	}
	if r.AttentionBias != nil && *r.AttentionBias {
		return Config{}, bad("attention_bias", "true unsupported")
	}
	if r.MLPBias != nil && *r.MLPBias {
		return Config{}, bad("mlp_bias", "true unsupported")
	}
	if r.PretrainingTP != nil && *r.PretrainingTP > 1 {
		return Config{}, bad("pretraining_tp", "%d unsupported (want 1)", *r.PretrainingTP)
	}
	req := func(p *int, field string, max int) (int, error) {
		if p == nil {
			return 0, bad(field, "missing")
		}
		if *p <= 0 || *p > max {
			return 0, bad(field, "%d out of range [1, %d]", *p, max)
		}
		return *p, nil
	}
	c := Config{Arch: arch.Name, QKVBias: arch.QKVBias}
	if c.HiddenSize, err = req(r.HiddenSize, "hidden_size", maxHidden); err != nil {
		return Config{}, err
	}
	if c.IntermediateSize, err = req(r.IntermediateSize, "intermediate_size", maxIntermedia); err != nil {
		return Config{}, err
	}
	if c.NumLayers, err = req(r.NumHiddenLayers, "num_hidden_layers", maxLayers); err != nil {
		return Config{}, err
	}
	if c.NumHeads, err = req(r.NumAttentionHeads, "num_attention_heads", maxHeads); err != nil {
		return Config{}, err
	}
	if r.NumKeyValueHeads == nil {
		c.NumKVHeads = c.NumHeads
	} else if c.NumKVHeads, err = req(r.NumKeyValueHeads, "num_key_value_heads", maxHeads); err != nil {
		return Config{}, err
	}
	if c.NumHeads%c.NumKVHeads != 0 {
		return Config{}, bad("num_key_value_heads", "%d does not divide num_attention_heads %d", c.NumKVHeads, c.NumHeads)
	}
	if r.HeadDim == nil {
		if c.HiddenSize%c.NumHeads != 0 {
			return Config{}, bad("num_attention_heads", "%d does not divide hidden_size %d (and head_dim is absent)", c.NumHeads, c.HiddenSize)
		}
		c.HeadDim = c.HiddenSize / c.NumHeads
	} else if c.HeadDim, err = req(r.HeadDim, "head_dim", maxHeadDim); err != nil {
		return Config{}, err
	}
	if c.HeadDim%2 != 0 {
		return Config{}, bad("head_dim", "%d is odd (RoPE needs an even head_dim)", c.HeadDim)
	}
	if c.VocabSize, err = req(r.VocabSize, "vocab_size", maxVocab); err != nil {
		return Config{}, err
	}
	if r.MaxPositionEmbeddings == nil {
		c.MaxPositions = 2048
	} else if c.MaxPositions, err = req(r.MaxPositionEmbeddings, "max_position_embeddings", maxPositions); err != nil {
		return Config{}, err
	}
	c.RMSNormEps = 1e-6
	if r.RMSNormEps != nil {
		if !(*r.RMSNormEps > 0 && *r.RMSNormEps < 1) {
			return Config{}, bad("rms_norm_eps", "%v out of range (0, 1)", *r.RMSNormEps)
		}
		c.RMSNormEps = *r.RMSNormEps
	}
	c.RopeTheta = 10000
	if r.RopeTheta != nil {
		c.RopeTheta = *r.RopeTheta
	}
	c.RopeScaling.Type = RopeDefault
	ropeRaw, ropeField := r.RopeScaling, "rope_scaling"
	if isNull(ropeRaw) && !isNull(r.RopeParameters) {
		ropeRaw, ropeField = r.RopeParameters, "rope_parameters"
	}
	if !isNull(ropeRaw) {
		var rr rawRope
		if err := json.Unmarshal(ropeRaw, &rr); err != nil {
			return Config{}, bad(ropeField, "%v", err)
		}
		if rr.RopeTheta != nil && r.RopeTheta == nil {
			c.RopeTheta = *rr.RopeTheta
		}
		t := rr.RopeType
		if t == "" {
			t = rr.Type
		}
		switch t {
		case "", "default", "none":
			c.RopeScaling.Type = RopeDefault
		case RopeLinear:
			if rr.Factor == nil || !(*rr.Factor >= 1) || math.IsInf(*rr.Factor, 0) {
				return Config{}, bad(ropeField+".factor", "linear scaling needs factor >= 1")
			}
			c.RopeScaling = RopeScaling{Type: RopeLinear, Factor: *rr.Factor}
		case RopeLlama3:
			if rr.Factor == nil || !(*rr.Factor >= 1) || math.IsInf(*rr.Factor, 0) {
				return Config{}, bad(ropeField+".factor", "llama3 scaling needs factor >= 1")
			}
			if rr.LowFreqFactor == nil || !(*rr.LowFreqFactor > 0) {
				return Config{}, bad(ropeField+".low_freq_factor", "missing or not positive")
			}
			if rr.HighFreqFactor == nil || !(*rr.HighFreqFactor > *rr.LowFreqFactor) {
				return Config{}, bad(ropeField+".high_freq_factor", "missing or not greater than low_freq_factor")
			}
			if rr.OriginalMaxPositionEmbeddings == nil || *rr.OriginalMaxPositionEmbeddings <= 0 {
				return Config{}, bad(ropeField+".original_max_position_embeddings", "missing or not positive")
			}
			c.RopeScaling = RopeScaling{Type: RopeLlama3, Factor: *rr.Factor, LowFreqFactor: *rr.LowFreqFactor,
				HighFreqFactor: *rr.HighFreqFactor, OriginalMaxPositions: *rr.OriginalMaxPositionEmbeddings}
		default:
			return Config{}, bad(ropeField+".rope_type", "%q unsupported (want default, linear or llama3)", t)
		}
	}
	if !(c.RopeTheta > 0) || math.IsInf(c.RopeTheta, 0) {
		return Config{}, bad("rope_theta", "%v not positive", c.RopeTheta)
	}
	c.TieWordEmbeddings = r.TieWordEmbeddings != nil && *r.TieWordEmbeddings
	c.BOS = -1
	if !isNull(r.BOSTokenID) {
		ids, err := parseIDs(r.BOSTokenID, c.VocabSize)
		if err != nil || len(ids) != 1 {
			return Config{}, bad("bos_token_id", "want one id in [0, %d)", c.VocabSize)
		}
		c.BOS = ids[0]
	}
	if !isNull(r.EOSTokenID) {
		ids, err := parseIDs(r.EOSTokenID, c.VocabSize)
		if err != nil {
			return Config{}, bad("eos_token_id", "%v", err)
		}
		c.EOS = ids
	}
	c.DType = r.TorchDType
	if c.DType == "" {
		c.DType = r.DType
	}
	switch c.DType {
	case "", "float32", "float16", "bfloat16":
	default:
		return Config{}, bad("torch_dtype", "%q unsupported (want float32, float16 or bfloat16)", c.DType)
	}
	if arch.Parse != nil {
		var all map[string]any
		if err := json.Unmarshal(data, &all); err != nil {
			return Config{}, fmt.Errorf("%s: %v: %w", file, err, ErrBadConfig)
		}
		if err := arch.Parse(all, &c, bad); err != nil {
			return Config{}, err
		}
	}
	return c, nil
}

func isNull(m json.RawMessage) bool {
	s := strings.TrimSpace(string(m))
	return s == "" || s == "null"
}

var errIDRange = errors.New("id out of range")

// parseIDs accepts an int or a list of ints, each in [0, vocab).
func parseIDs(m json.RawMessage, vocab int) ([]int32, error) {
	var one int64
	if err := json.Unmarshal(m, &one); err == nil {
		if one < 0 || one >= int64(vocab) {
			return nil, fmt.Errorf("%d: %w [0, %d)", one, errIDRange, vocab)
		}
		return []int32{int32(one)}, nil
	}
	var many []int64
	if err := json.Unmarshal(m, &many); err != nil {
		return nil, fmt.Errorf("want an int or a list of ints")
	}
	if len(many) > 1024 {
		return nil, fmt.Errorf("%d ids exceeds limit 1024", len(many))
	}
	out := make([]int32, 0, len(many))
	for _, v := range many {
		if v < 0 || v >= int64(vocab) {
			return nil, fmt.Errorf("%d: %w [0, %d)", v, errIDRange, vocab)
		}
		out = append(out, int32(v))
	}
	return out, nil
}

type rawGenConfig struct {
	EOSTokenID  json.RawMessage `json:"eos_token_id"`
	BOSTokenID  json.RawMessage `json:"bos_token_id"`
	Temperature *float64        `json:"temperature"`
	TopP        *float64        `json:"top_p"`
	TopK        *int            `json:"top_k"`
	DoSample    *bool           `json:"do_sample"`
}

// ApplyGenerationConfig merges generation_config.json bytes into c: its EOS
// ids are added to c.EOS, and its sampling defaults are recorded.
func (c *Config) ApplyGenerationConfig(data []byte, file string) error {
	bad := func(field, format string, a ...any) error {
		return fmt.Errorf("%s: %s: %s: %w", file, field, fmt.Sprintf(format, a...), ErrBadConfig)
	}
	if len(data) > MaxConfigSize {
		return bad("(file)", "%d bytes exceeds limit %d", len(data), MaxConfigSize)
	}
	var g rawGenConfig
	if err := json.Unmarshal(data, &g); err != nil {
		return fmt.Errorf("%s: %v: %w", file, err, ErrBadConfig)
	}
	if !isNull(g.EOSTokenID) {
		ids, err := parseIDs(g.EOSTokenID, c.VocabSize)
		if err != nil {
			return bad("eos_token_id", "%v", err)
		}
		for _, id := range ids {
			if !containsID(c.EOS, id) {
				c.EOS = append(c.EOS, id)
			}
		}
	}
	if !isNull(g.BOSTokenID) && c.BOS < 0 {
		ids, err := parseIDs(g.BOSTokenID, c.VocabSize)
		if err != nil || len(ids) != 1 {
			return bad("bos_token_id", "want one id in [0, %d)", c.VocabSize)
		}
		c.BOS = ids[0]
	}
	sample := g.DoSample == nil || *g.DoSample
	if g.Temperature != nil && sample {
		if *g.Temperature < 0 || *g.Temperature > 100 {
			return bad("temperature", "%v out of range [0, 100]", *g.Temperature)
		}
		c.DefaultTemperature = float32(*g.Temperature)
	}
	if g.TopP != nil {
		if *g.TopP < 0 || *g.TopP > 1 {
			return bad("top_p", "%v out of range [0, 1]", *g.TopP)
		}
		c.DefaultTopP = float32(*g.TopP)
	}
	if g.TopK != nil {
		if *g.TopK < 0 {
			return bad("top_k", "%d negative", *g.TopK)
		}
		c.DefaultTopK = *g.TopK
	}
	return nil
}

func containsID(ids []int32, id int32) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// LoadConfig reads dir/config.json and, if present, dir/generation_config.json.
func LoadConfig(dir string) (Config, error) {
	data, err := readBounded(filepath.Join(dir, "config.json"), MaxConfigSize)
	if err != nil {
		return Config{}, fmt.Errorf("config.json: %w", err)
	}
	c, err := ParseConfig(data, "config.json")
	if err != nil {
		return Config{}, err
	}
	g, err := readBounded(filepath.Join(dir, "generation_config.json"), MaxConfigSize)
	if err == nil {
		if err := c.ApplyGenerationConfig(g, "generation_config.json"); err != nil {
			return Config{}, err
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return Config{}, fmt.Errorf("generation_config.json: %w", err)
	}
	return c, nil
}

// Validate checks the invariants ParseConfig guarantees; use it on a Config
// built by hand (tests, NewRandomModel).
func (c Config) Validate() error {
	bad := func(field, format string, a ...any) error {
		return fmt.Errorf("config: %s: %s: %w", field, fmt.Sprintf(format, a...), ErrBadConfig)
	}
	switch {
	case c.HiddenSize <= 0 || c.HiddenSize > maxHidden:
		return bad("hidden_size", "%d out of range", c.HiddenSize)
	case c.IntermediateSize <= 0 || c.IntermediateSize > maxIntermedia:
		return bad("intermediate_size", "%d out of range", c.IntermediateSize)
	case c.NumLayers <= 0 || c.NumLayers > maxLayers:
		return bad("num_hidden_layers", "%d out of range", c.NumLayers)
	case c.NumHeads <= 0 || c.NumHeads > maxHeads:
		return bad("num_attention_heads", "%d out of range", c.NumHeads)
	case c.NumKVHeads <= 0 || c.NumHeads%c.NumKVHeads != 0:
		return bad("num_key_value_heads", "%d does not divide num_attention_heads %d", c.NumKVHeads, c.NumHeads)
	case c.HeadDim <= 0 || c.HeadDim%2 != 0 || c.HeadDim > maxHeadDim:
		return bad("head_dim", "%d not a positive even number <= %d", c.HeadDim, maxHeadDim)
	case c.VocabSize <= 0 || c.VocabSize > maxVocab:
		return bad("vocab_size", "%d out of range", c.VocabSize)
	case c.MaxPositions <= 0 || c.MaxPositions > maxPositions:
		return bad("max_position_embeddings", "%d out of range", c.MaxPositions)
	case !(c.RMSNormEps > 0):
		return bad("rms_norm_eps", "%v not positive", c.RMSNormEps)
	case !(c.RopeTheta > 0):
		return bad("rope_theta", "%v not positive", c.RopeTheta)
	}
	if _, ok := Lookup(c.Arch); c.Arch != "" && !ok {
		return bad("architectures", "%q unsupported (%s)", c.Arch, wantArchs())
	}
	switch c.RopeScaling.Type {
	case "", RopeDefault:
	case RopeLinear:
		if !(c.RopeScaling.Factor >= 1) {
			return bad("rope_scaling.factor", "%v < 1", c.RopeScaling.Factor)
		}
	case RopeLlama3:
		r := c.RopeScaling
		if !(r.Factor >= 1) || !(r.LowFreqFactor > 0) || !(r.HighFreqFactor > r.LowFreqFactor) || r.OriginalMaxPositions <= 0 {
			return bad("rope_scaling", "invalid llama3 parameters %+v", r)
		}
	default:
		return bad("rope_scaling.rope_type", "%q unsupported", c.RopeScaling.Type)
	}
	for _, id := range c.EOS {
		if id < 0 || int(id) >= c.VocabSize {
			return bad("eos_token_id", "%d out of range [0, %d)", id, c.VocabSize)
		}
	}
	if c.BOS >= int32(c.VocabSize) {
		return bad("bos_token_id", "%d out of range [0, %d)", c.BOS, c.VocabSize)
	}
	return nil
}

// readBounded reads a whole file of at most limit bytes.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%d bytes exceeds limit %d: %w", st.Size(), limit, ErrBadConfig)
	}
	return io.ReadAll(io.LimitReader(f, limit+1))
}
