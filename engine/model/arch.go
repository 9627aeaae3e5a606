package model

import (
	"fmt"
	"slices"
	"sort"
	"sync"
)

// Arch is a decoder architecture registered by name: how its config.json
// is recognised and which features its forward needs. Tensor names and
// shapes follow from Config (Tensors); backends read the features from
// Config (QKVBias), so a new architecture that differs from Llama only in
// features is one Register call.
type Arch struct {
	// Name is the HF class in config.json "architectures" ("LlamaForCausalLM").
	Name string
	// ModelType is config.json "model_type" ("llama").
	ModelType string
	// QKVBias: q_proj, k_proj and v_proj carry a bias (o_proj does not).
	QKVBias bool
	// Parse checks and applies architecture-specific config.json keys
	// (raw is the whole file); bad builds an error naming the key.
	Parse func(raw map[string]any, c *Config, bad func(field, format string, a ...any) error) error
}

var (
	archMu sync.RWMutex
	archs  = map[string]*Arch{}
)

// Register adds an architecture; registering a name twice panics.
func Register(a *Arch) {
	archMu.Lock()
	defer archMu.Unlock()
	if _, dup := archs[a.Name]; dup || a.Name == "" {
		panic("model: Register: duplicate or empty architecture " + a.Name)
	}
	archs[a.Name] = a
}

// Lookup finds a registered architecture by its class name.
func Lookup(name string) (*Arch, bool) {
	archMu.RLock()
	defer archMu.RUnlock()
	a, ok := archs[name]
	return a, ok
}

// Archs lists the registered architecture names, sorted.
func Archs() []string {
	archMu.RLock()
	defer archMu.RUnlock()
	var out []string
	for n := range archs {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// archFor picks the architecture of a config.json: the first registered
// name in architectures, else the one whose model_type matches.
func archFor(names []string, modelType string) (*Arch, error) {
	archMu.RLock()
	defer archMu.RUnlock()
	for _, n := range names {
		if a, ok := archs[n]; ok {
			if modelType != "" && modelType != a.ModelType {
				return nil, fmt.Errorf("model_type %q does not match architecture %s (want %q)", modelType, n, a.ModelType)
			}
			return a, nil
		}
	}
	if len(names) == 0 {
		for _, a := range archs {
			if a.ModelType == modelType {
				return a, nil
			}
		}
	}
	return nil, nil
}

func wantArchs() string {
	a := Archs()
	return "want one of " + fmt.Sprint(slices.Clip(a))
}

// Llama is LlamaForCausalLM: RMSNorm, RoPE, GQA, SwiGLU, no biases.
var Llama = &Arch{Name: "LlamaForCausalLM", ModelType: "llama"}

// Qwen2 is Qwen2ForCausalLM: Llama's forward with biases on the q, k and v
// projections. Sliding-window attention is not implemented: a config that
// turns it on is rejected.
var Qwen2 = &Arch{Name: "Qwen2ForCausalLM", ModelType: "qwen2", QKVBias: true, Parse: parseQwen2}

func parseQwen2(raw map[string]any, c *Config, bad func(field, format string, a ...any) error) error {
	if v, ok := raw["use_sliding_window"].(bool); ok && v {
		return bad("use_sliding_window", "true unsupported (sliding-window attention is not implemented)")
	}
	if lt, ok := raw["layer_types"].([]any); ok {
		for i, t := range lt {
			if s, _ := t.(string); s != "full_attention" {
				return bad(fmt.Sprintf("layer_types[%d]", i), "%v unsupported (want full_attention)", t)
			}
		}
	}
	return nil
}

func init() {
	Register(Llama)
	Register(Qwen2)
}
