package speculative

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/specgate/specgate/engine"
)

// ErrVocabMismatch is wrapped when a draft model's vocabulary or tokenizer
// differs from the target's: its proposals would be token ids of another
// language, and verification would silently reject (or worse, accept) them.
var ErrVocabMismatch = errors.New("speculative: draft and target vocabularies differ")

// ErrConfig is wrapped by invalid Config fields.
var ErrConfig = errors.New("speculative: invalid config")

// Method names a proposal shape.
type Method string

// Proposal shapes.
const (
	// MethodChain proposes K tokens in a line (classic speculative decoding).
	MethodChain Method = "chain"
	// MethodTree proposes a static tree: node at depth d gets Branching[d]
	// children (the draft's most likely tokens, or draws without replacement
	// when sampling), nodes expanded in order of cumulative draft
	// probability until Budget nodes.
	MethodTree Method = "tree"
	// MethodDynamic proposes a tree shaped by draft confidence (EAGLE-2): at
	// every depth the Width child slots with the highest cumulative draft
	// probability over the whole frontier are expanded, until Budget nodes.
	MethodDynamic Method = "dynamic"
)

// Config tunes a draft-model speculator. The zero value (with a Method) is usable.
type Config struct {
	Method Method
	// K is the chain length, or the maximum tree depth; 0 = 4 (chain) or 5 (trees).
	K int
	// Branching[d] is the number of children of a node at depth d (the root
	// has depth 0) for MethodTree; the last entry repeats. nil = [4, 2, 2, 1].
	Branching []int
	// Budget is the most tree nodes per step (MethodTree, MethodDynamic);
	// 0 = 16. Chains have K nodes.
	Budget int
	// Width is the most nodes per depth level of MethodDynamic; 0 = 6.
	Width int
	// Adaptive lets the engine size each step's draft (engine.Options:
	// FixedDraft false): a request is given the nodes that pay for
	// themselves by its measured acceptance and the measured cost of
	// forwards and draft levels, none when speculation does not pay. Without
	// it every request gets its whole draft every step.
	Adaptive bool
	// VocabLimit restricts the draft's LM head to its VocabLimit most
	// frequent tokens (FR-Spec; 0 = the whole vocabulary): the draft never
	// proposes other tokens, and its forwards skip most of the LM head,
	// which is two thirds of the shipped draft's weights. Lossless either
	// way (the target verifies). Needs a backend that forwards hidden rows
	// only (engine.Model.SupportsHiddenOnly: the CPU backend); elsewhere
	// the full head is used.
	VocabLimit int
	// TokenFrequency is the {"counts": [vocab_size]} file that ranks tokens
	// for VocabLimit; "" = token_frequency.json in the draft's, else the
	// target's directory.
	TokenFrequency string
}

// defaults returns cfg with zero fields filled in, or an error naming the field.
func (c Config) withDefaults() (Config, error) {
	switch c.Method {
	case "":
		c.Method = MethodChain
	case MethodChain, MethodTree, MethodDynamic:
	default:
		return c, fmt.Errorf("%w: method %q (want chain, tree or dynamic)", ErrConfig, c.Method)
	}
	if c.K < 0 || c.K > 64 {
		return c, fmt.Errorf("%w: k %d not in [0, 64]", ErrConfig, c.K)
	}
	if c.K == 0 {
		c.K = 4
		if c.Method != MethodChain {
			c.K = 5
		}
	}
	if c.Branching == nil {
		c.Branching = []int{4, 2, 2, 1}
	}
	if len(c.Branching) == 0 || len(c.Branching) > 64 {
		return c, fmt.Errorf("%w: branching has %d entries, want 1..64", ErrConfig, len(c.Branching))
	}
	for i, b := range c.Branching {
		if b < 1 || b > 64 {
			return c, fmt.Errorf("%w: branching[%d] = %d not in [1, 64]", ErrConfig, i, b)
		}
	}
	if c.Budget < 0 || c.Budget > 1024 {
		return c, fmt.Errorf("%w: budget %d not in [0, 1024]", ErrConfig, c.Budget)
	}
	if c.Budget == 0 {
		c.Budget = 16
	}
	if c.Method == MethodChain {
		c.Budget = c.K
	}
	if c.Width < 0 || c.Width > 64 {
		return c, fmt.Errorf("%w: width %d not in [0, 64]", ErrConfig, c.Width)
	}
	if c.Width == 0 {
		c.Width = 6
	}
	if c.VocabLimit < 0 {
		return c, fmt.Errorf("%w: vocab limit %d negative", ErrConfig, c.VocabLimit)
	}
	return c, nil
}

// NewDraft returns a proposer that drafts with draft for target. Both
// models stay owned by the caller (the proposer keeps one draft Sequence
// per request, freed on Release). It refuses a draft whose
// vocabulary differs from the target's (ErrVocabMismatch) and invalid
// Config fields (ErrConfig).
func NewDraft(target, draft *engine.Model, cfg Config) (*Draft, error) {
	if target == nil || draft == nil {
		return nil, fmt.Errorf("%w: nil model", ErrConfig)
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := CheckVocab(target, draft); err != nil {
		return nil, err
	}
	d := &Draft{target: target, draft: draft, cfg: c, seqs: map[engine.RequestID]*engine.Sequence{}}
	if c.VocabLimit > 0 && c.VocabLimit < draft.Config.VocabSize && draft.SupportsHiddenOnly() {
		path, err := frequencyPath(c, target, draft)
		if err != nil {
			return nil, err
		}
		counts, err := readTokenFrequency(path)
		if err != nil {
			return nil, err
		}
		if d.head, err = newDraftHead(draft, counts, c.VocabLimit); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	return d, nil
}

// EngineOptions returns o with d as the engine's proposer: the draft size
// per request (MaxDraft) from d's config, and FixedDraft unless Adaptive.
func (d *Draft) EngineOptions(o engine.Options) engine.Options {
	o.Proposers = []engine.Proposer{d}
	o.MaxDraft = d.cfg.Budget
	o.FixedDraft = !d.cfg.Adaptive
	return o
}

// CheckVocab returns nil when draft can propose for target: equal
// config.json vocab_size and, when both have a tokenizer, the same token
// string for every id; models loaded without a tokenizer are compared by the
// SHA-256 of their tokenizer.json. Errors wrap ErrVocabMismatch and name
// both directories and the first difference.
func CheckVocab(target, draft *engine.Model) error {
	name := func(m *engine.Model) string {
		if m.Dir == "" {
			return "(random model)"
		}
		return m.Dir
	}
	tn, dn := name(target), name(draft)
	if target.Config.VocabSize != draft.Config.VocabSize {
		return fmt.Errorf("%w: config.json vocab_size: target %s has %d, draft %s has %d", ErrVocabMismatch,
			tn, target.Config.VocabSize, dn, draft.Config.VocabSize)
	}
	tt, dt := target.Tokenizer, draft.Tokenizer
	switch {
	case tt != nil && dt != nil:
		if tt.VocabSize() != dt.VocabSize() {
			return fmt.Errorf("%w: tokenizer.json: target %s has %d tokens, draft %s has %d", ErrVocabMismatch,
				tn, tt.VocabSize(), dn, dt.VocabSize())
		}
		for id := range int32(tt.VocabSize()) {
			if a, b := tt.Token(id), dt.Token(id); a != b {
				return fmt.Errorf("%w: tokenizer.json: id %d is %q in target %s, %q in draft %s", ErrVocabMismatch, id, a, tn, b, dn)
			}
		}
		return nil
	case tt == nil && dt == nil && target.Dir == "" && draft.Dir == "":
		return nil // random test models: ids are the vocabulary
	case target.Dir != "" && draft.Dir != "":
		a, err := hashFile(filepath.Join(target.Dir, "tokenizer.json"))
		if err != nil {
			return fmt.Errorf("%w: target %s: %v", ErrVocabMismatch, tn, err)
		}
		b, err := hashFile(filepath.Join(draft.Dir, "tokenizer.json"))
		if err != nil {
			return fmt.Errorf("%w: draft %s: %v", ErrVocabMismatch, dn, err)
		}
		if !bytes.Equal(a, b) {
			return fmt.Errorf("%w: tokenizer.json of target %s and draft %s differ (sha256 %x vs %x)", ErrVocabMismatch, tn, dn, a[:8], b[:8])
		}
		return nil
	default:
		return fmt.Errorf("%w: cannot compare tokenizers of target %s and draft %s (one has none)", ErrVocabMismatch, tn, dn)
	}
}

// hashFile returns the SHA-256 of a file of at most 64 MiB.
func hashFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(f, 64<<20+1))
	if err != nil {
		return nil, err
	}
	if n > 64<<20 {
		return nil, fmt.Errorf("%s: larger than 64 MiB", path)
	}
	return h.Sum(nil), nil
}

// FromFlags builds the draft-model proposer of the generate CLI flags
// `--draft DIR --spec chain|tree|dynamic --spec-k N`: it loads the draft
// model from draftDir (CPU backend; the caller closes nothing: the draft
// lives as long as the process) and returns NewDraft's proposer. An empty
// draftDir returns (nil, nil): no speculation. k = 0 turns on adaptive
// speculation with the method's default maximum depth; k > 0 fixes the
// depth (chain length) at k. vocab and freq are Config.VocabLimit and
// Config.TokenFrequency (`--draft-vocab N --draft-freq FILE`); vocab < 0
// is DefaultVocabLimit where token frequencies are found (freq, or
// token_frequency.json next to the draft or the target), else the whole
// vocabulary.
func FromFlags(target *engine.Model, draftDir, method string, k, vocab int, freq string) (*Draft, error) {
	if draftDir == "" {
		return nil, nil
	}
	if k < 0 {
		return nil, fmt.Errorf("%w: --spec-k %d negative", ErrConfig, k)
	}
	cfg := Config{Method: Method(method), K: k, Adaptive: k == 0, VocabLimit: max(vocab, 0), TokenFrequency: freq}
	if _, err := cfg.withDefaults(); err != nil {
		return nil, fmt.Errorf("--spec: %w", err)
	}
	draft, err := engine.Load(draftDir, engine.LoadOptions{})
	if err != nil {
		return nil, fmt.Errorf("--draft: %w", err)
	}
	if vocab < 0 {
		if _, err := frequencyPath(cfg, target, draft); err == nil {
			cfg.VocabLimit = DefaultVocabLimit
		}
	}
	d, err := NewDraft(target, draft, cfg)
	if err != nil {
		draft.Close()
		return nil, err
	}
	return d, nil
}
