package speculative

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/specgate/specgate/engine"
)

func TestConfigErrors(t *testing.T) {
	target, draft := tinyPair()
	bad := []Config{
		{Method: "beam"},
		{K: -1},
		{K: 65},
		{Method: MethodTree, Branching: []int{2, 0}},
		{Method: MethodTree, Branching: []int{}},
		{Budget: 5000},
		{Width: -2},
	}
	for _, c := range bad {
		if _, err := NewDraft(target, draft, c); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: err %v, want ErrConfig", c, err)
		}
	}
	d, err := NewDraft(target, draft, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if c := d.Config(); c.Method != MethodChain || c.K != 4 || c.Budget != 4 {
		t.Errorf("defaults %+v", c)
	}
	if _, err := NewDraft(nil, draft, Config{}); !errors.Is(err, ErrConfig) {
		t.Errorf("nil target: %v", err)
	}
}

func TestVocabMismatchRandom(t *testing.T) {
	cfg := tinyConfig()
	cfg.VocabSize = 13
	other := engine.NewRandomModel(cfg, 1, engine.LoadOptions{KVTokens: 64, Threads: 1})
	target, _ := tinyPair()
	_, err := NewDraft(target, other, Config{})
	if !errors.Is(err, ErrVocabMismatch) || !strings.Contains(err.Error(), "vocab_size") {
		t.Fatalf("err %v, want ErrVocabMismatch naming vocab_size", err)
	}
}

// swappedTokenizerDir returns a copy of the shipped draft (files linked)
// whose tokenizer.json has the ids of two tokens swapped: same size, same
// merges, different id -> string map.
func swappedTokenizerDir(t *testing.T) string {
	t.Helper()
	src, _ := filepath.Abs("../models/specgate-draft")
	dir := t.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() != "tokenizer.json" {
			if err := os.Symlink(filepath.Join(src, e.Name()), filepath.Join(dir, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	raw, err := os.ReadFile(filepath.Join(src, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	var tj map[string]any
	if err := json.Unmarshal(raw, &tj); err != nil {
		t.Fatal(err)
	}
	vocab := tj["model"].(map[string]any)["vocab"].(map[string]any)
	var a, b string
	for k, v := range vocab {
		switch v.(float64) {
		case 300:
			a = k
		case 301:
			b = k
		}
	}
	vocab[a], vocab[b] = 301.0, 300.0
	out, err := json.Marshal(tj)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), out, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestVocabMismatchShipped(t *testing.T) {
	if testing.Short() {
		t.Skip("loads the shipped models")
	}
	target, draft := shippedPair(t)
	if err := CheckVocab(target, draft); err != nil {
		t.Fatalf("shipped pair refused: %v", err)
	}
	dir := swappedTokenizerDir(t)
	bad, err := engine.Load(dir, engine.LoadOptions{KVTokens: 64})
	if err != nil {
		t.Fatal(err)
	}
	_, err = NewDraft(target, bad, Config{})
	if !errors.Is(err, ErrVocabMismatch) || !strings.Contains(err.Error(), "id 300") {
		t.Fatalf("swapped tokenizer: err %v, want ErrVocabMismatch naming id 300", err)
	}
	// without loaded tokenizers the tokenizer.json hashes are compared.
	noTok, err := engine.Load(dir, engine.LoadOptions{KVTokens: 64, SkipTokenizer: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckVocab(target, noTok); !errors.Is(err, ErrVocabMismatch) || !strings.Contains(err.Error(), "sha256") {
		t.Fatalf("hash comparison: err %v, want a sha256 ErrVocabMismatch", err)
	}
	sameNoTok, err := engine.Load("../models/specgate-draft", engine.LoadOptions{KVTokens: 64, SkipTokenizer: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckVocab(target, sameNoTok); err != nil {
		t.Fatalf("same tokenizer.json by hash: %v", err)
	}
	// FromFlags: no draft, a bad method, the swapped draft.
	if s, err := FromFlags(target, "", "chain", 4, 0, ""); s != nil || err != nil {
		t.Fatalf("FromFlags without draft: %v, %v", s, err)
	}
	if _, err := FromFlags(target, "../models/specgate-draft", "beam", 4, 0, ""); !errors.Is(err, ErrConfig) {
		t.Fatalf("FromFlags bad method: %v", err)
	}
	if _, err := FromFlags(target, dir, "tree", 0, 0, ""); !errors.Is(err, ErrVocabMismatch) {
		t.Fatalf("FromFlags swapped draft: %v", err)
	}
	s, err := FromFlags(target, "../models/specgate-draft", "dynamic", 0, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	if c := s.Config(); c.Method != MethodDynamic || !c.Adaptive || c.K != 5 {
		t.Fatalf("FromFlags config %+v", c)
	}
	if s.VocabLimit() != target.Config.VocabSize {
		t.Fatalf("no vocab limit: drafts from %d tokens", s.VocabLimit())
	}
	// a vocabulary limit: without frequencies (random models have no
	// directory), a missing file, a file of another vocabulary, the
	// target's own file (the default), then the CLI's auto default.
	rt, rd := tinyPair()
	if _, err := NewDraft(rt, rd, Config{VocabLimit: 6}); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), TokenFrequencyFile) {
		t.Fatalf("vocab limit without frequencies: %v", err)
	}
	if _, err := FromFlags(target, "../models/specgate-draft", "chain", 2, 2048, filepath.Join(dir, "nope.json")); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "nope.json") {
		t.Fatalf("missing frequency file: %v", err)
	}
	short := filepath.Join(t.TempDir(), "freq.json")
	if err := os.WriteFile(short, []byte(`{"counts": [1, 2, 3]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := FromFlags(target, "../models/specgate-draft", "chain", 2, 2048, short); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "3 counts") {
		t.Fatalf("frequencies of another vocabulary: %v", err)
	}
	if _, err := NewDraft(target, sameNoTok, Config{VocabLimit: -1}); !errors.Is(err, ErrConfig) {
		t.Fatalf("negative vocab limit: %v", err)
	}
	for _, freq := range []string{shippedFrequency, ""} {
		s, err = FromFlags(target, "../models/specgate-draft", "chain", 2, 2048, freq)
		if err != nil {
			t.Fatal(err)
		}
		if s.VocabLimit() != 2048 {
			t.Fatalf("vocab limit 2048, frequencies %q: drafts from %d tokens", freq, s.VocabLimit())
		}
	}
	s, err = FromFlags(target, "../models/specgate-draft", "chain", 0, -1, "")
	if err != nil {
		t.Fatal(err)
	}
	if s.VocabLimit() != DefaultVocabLimit {
		t.Fatalf("auto vocab limit with the target's frequencies: drafts from %d tokens", s.VocabLimit())
	}
}
