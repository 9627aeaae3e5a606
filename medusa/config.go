package medusa

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/safetensors"
)

// Spec is a Medusa setting as configured: the YAML
// `speculative: {method: medusa, heads: DIR, tree: ..., vocab_limit: N}`
// or the generate flags --medusa DIR --medusa-tree ... .
type Spec struct {
	Heads string // heads directory
	// Tree selects the candidate tree (see ParseTree): "" = the directory's
	// tuned tree cut to its default size.
	Tree string
	// VocabLimit: LoadOptions.VocabLimit (0 = the full vocabulary).
	VocabLimit int
	// Threads: LoadOptions.Threads, the most threads the heads' CPU matmuls
	// run on (0 = GOMAXPROCS); serving passes the model's cpu.threads.
	Threads int
}

// ParseTree reads a tree setting for heads with config c:
//
//	""             the directory's tuned tree (specgate.tree) cut to specgate.nodes
//	"N"            its first N nodes
//	"chain" / "chain:N"  one candidate per head, N heads deep (default all)
//	"[[0],[0,0],[1]]"    explicit Medusa choices paths, priority order
func ParseTree(spec string, c Config) (*Tree, error) {
	s := strings.TrimSpace(spec)
	tuned := func() ([][]int, error) {
		if c.Specgate.Tree == nil {
			return ChainTree(c.NumHeads), nil
		}
		return c.Specgate.Tree, nil
	}
	switch {
	case s == "":
		paths, _ := tuned()
		t, err := NewTree(paths, c.NumHeads)
		if err != nil {
			return nil, err
		}
		return t.Prefix(c.Specgate.Nodes), nil
	case s == "chain" || strings.HasPrefix(s, "chain:"):
		d := c.NumHeads
		if v, ok := strings.CutPrefix(s, "chain:"); ok {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > c.NumHeads {
				return nil, fmt.Errorf("%w: tree %q: want chain:N with N in [1, %d]", ErrFormat, spec, c.NumHeads)
			}
			d = n
		}
		return NewTree(ChainTree(d), c.NumHeads)
	case strings.HasPrefix(s, "["):
		var paths [][]int
		if err := json.Unmarshal([]byte(s), &paths); err != nil {
			return nil, fmt.Errorf("%w: tree %q: want JSON paths like [[0],[0,0],[1]]: %v", ErrFormat, spec, err)
		}
		if len(paths) == 0 {
			return nil, fmt.Errorf("%w: tree %q: no paths", ErrFormat, spec)
		}
		return NewTree(paths, c.NumHeads)
	default:
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%w: tree %q: want a node count, chain[:N] or JSON paths", ErrFormat, spec)
		}
		paths, _ := tuned()
		if n > len(paths) {
			return nil, fmt.Errorf("%w: tree %q: the heads' tree has %d nodes", ErrFormat, spec, len(paths))
		}
		return NewTree(paths[:n], c.NumHeads)
	}
}

// Check validates a Medusa setting without loading a model (for `config
// check`): the heads directory's config.json, the weights file's header
// (tensor names and shapes, against hidden/vocab when given: 0 = unknown;
// every tensor Load requires and its dtype, through Load's own
// medusaLayout / hydraLayout),
// the token frequency file when VocabLimit needs it, and the tree.
func Check(s Spec, hidden, vocab int) error {
	if s.Heads == "" {
		return fmt.Errorf("%w: heads directory: empty", ErrFormat)
	}
	cfgPath := filepath.Join(s.Heads, ConfigFile)
	raw, err := os.ReadFile(cfgPath)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrFormat, err)
	}
	cfg, err := ParseConfig(raw, cfgPath)
	if err != nil {
		return err
	}
	if _, err := ParseTree(s.Tree, cfg); err != nil {
		return err
	}
	if s.VocabLimit < 0 {
		return fmt.Errorf("%w: vocab_limit %d < 0", ErrFormat, s.VocabLimit)
	}
	if s.VocabLimit > 0 && cfg.Specgate.TokenFrequency == "" {
		return fmt.Errorf("%s: specgate.token_frequency: missing (needed for vocab_limit %d): %w", cfgPath, s.VocabLimit, ErrFormat)
	}
	if hidden == 0 {
		hidden = cfg.HiddenSize
	}
	if vocab == 0 {
		vocab = cfg.VocabSize
	}
	if cfg.Hydra {
		return checkHydra(s, cfg, hidden, vocab) // hydra.go
	}
	wPath := filepath.Join(s.Heads, WeightsFile)
	if _, err := os.Stat(wPath); errors.Is(err, os.ErrNotExist) {
		if _, perr := os.Stat(filepath.Join(s.Heads, PickleFile)); perr == nil {
			return fmt.Errorf("%s: a PyTorch pickle; specgate reads %s only (see package medusa for the conversion): %w", filepath.Join(s.Heads, PickleFile), WeightsFile, ErrFormat)
		}
	}
	f, err := safetensors.Open(wPath)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrFormat, err)
	}
	defer f.Close()
	names, err := medusaNames(f, wPath, cfgPath, cfg.NumHeads, cfg.NumLayers)
	if err != nil {
		return err
	}
	for _, n := range f.Names() {
		info, _ := f.Info(n)
		c := strings.TrimPrefix(n, "medusa_head.")
		var want []int64
		switch {
		case strings.HasSuffix(c, ".linear.weight"):
			want = []int64{int64(hidden), int64(hidden)}
		case strings.HasSuffix(c, ".linear.bias"):
			want = []int64{int64(hidden)}
		case strings.HasSuffix(c, ".linear.weight_scale"):
			want = []int64{int64(hidden)} // int8 block weights' per-row scales
		case strings.HasSuffix(c, ".weight_scale"):
			rows := vocab
			if cfg.Specgate.HeadVocab > 0 {
				rows = cfg.Specgate.HeadVocab
			}
			want = []int64{int64(rows)} // int8 projection's per-row scales
		case strings.HasSuffix(c, ".weight"):
			rows := vocab
			if cfg.Specgate.HeadVocab > 0 {
				rows = cfg.Specgate.HeadVocab // FR-Spec projection (Load checks the frequency file)
			}
			want = []int64{int64(rows), int64(hidden)}
		default:
			return fmt.Errorf("%s: tensor %q: not a Medusa head parameter: %w", wPath, n, ErrFormat)
		}
		if len(info.Shape) != len(want) {
			return fmt.Errorf("%s: tensor %q: shape %v: %w", wPath, n, info.Shape, ErrFormat)
		}
		for i, d := range want {
			if d != 0 && info.Shape[i] != d {
				return fmt.Errorf("%s: tensor %q: shape %v, want %v (hidden_size %d, vocab_size %d): %w", wPath, n, info.Shape, want, hidden, vocab, ErrMismatch)
			}
		}
	}
	rd := &weightReader{set: f, file: wPath, names: names, H: hidden, V: vocab,
		missing: fmt.Sprintf("%d heads x %d layers in %s", cfg.NumHeads, cfg.NumLayers, cfgPath)}
	own, err := medusaLayout(rd, cfg, cfgPath)
	if err != nil {
		return err // what Load refuses before reading a value
	}
	return checkRows(s, cfg, wPath, vocab, own)
}

// checkRows is the part of Load's projection setup that needs no model
// (heads.go Load, hydra.go loadHydra, setProjections), for Check: with own
// projections share_lm_head is refused, and where Load reads the
// token_frequency file (FR-Spec rows of head_vocab, a vocabulary limit
// below the projection's rows, Hydra heads on the lm_head's head_vocab
// rows) it is read against vocab (0 = unknown: not read).
func checkRows(s Spec, cfg Config, wPath string, vocab int, own bool) error {
	cfgPath := filepath.Join(s.Heads, ConfigFile)
	if cfg.Specgate.ShareLMHead && own {
		return fmt.Errorf("%s: specgate.share_lm_head is true but %s has vocabulary projections: %w", cfgPath, wPath, ErrFormat)
	}
	HV, limit := cfg.Specgate.HeadVocab, s.VocabLimit
	if vocab == 0 {
		return nil
	}
	if HV > vocab {
		return fmt.Errorf("%s: specgate.head_vocab %d > target vocab_size %d: %w", cfgPath, HV, vocab, ErrMismatch)
	}
	rows := vocab
	switch {
	case HV > 0 && own:
		if _, err := frequentTokens(s.Heads, cfg, vocab, HV); err != nil {
			return err
		}
		rows = HV
	case HV > 0 && (limit == 0 || limit > HV):
		limit = HV // Hydra heads on the lm_head's head_vocab rows (Medusa: refused by medusaLayout)
	}
	if limit > 0 && limit < rows {
		if _, err := frequentTokens(s.Heads, cfg, vocab, limit); err != nil {
			return err
		}
	}
	return nil
}

// New loads s.Heads for target and returns a proposer over the tree s.Tree.
func New(target *engine.Model, s Spec) (*Proposer, error) {
	h, err := Load(s.Heads, target, LoadOptions{VocabLimit: s.VocabLimit, Threads: s.Threads})
	if err != nil {
		return nil, err
	}
	t, err := ParseTree(s.Tree, h.Config)
	if err != nil {
		return nil, err
	}
	p, err := NewProposer(h, t)
	if err != nil {
		return nil, err
	}
	p.AttachDevice(target) // heads inside the target's forward where the backend can run them (device.go)
	return p, nil
}
