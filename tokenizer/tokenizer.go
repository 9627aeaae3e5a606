// Package tokenizer implements Hugging Face tokenizer.json tokenizers in pure Go (WordPiece for the
// BERT encoder of the cache: wordpiece.go; for generative models):
// byte-level BPE (GPT-2 / Llama-3 style) and SentencePiece-style BPE (Llama-2 style with
// Metaspace and byte fallback), added/special tokens, the normalizers, pre-tokenizers,
// post-processors and decoders these families use, streaming detokenization, and a small
// Jinja2-subset interpreter for chat templates from tokenizer_config.json.
//
// A *Tokenizer is immutable after Load/FromJSON (its internal word cache is synchronized)
// and safe for concurrent use by many goroutines; a *StreamDecoder is not (one per sequence).
package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"
)

// Sentinel errors. Returned errors wrap one of these and name the file and field.
var (
	// ErrFormat: tokenizer.json / tokenizer_config.json is malformed or inconsistent.
	ErrFormat = errors.New("malformed tokenizer file")
	// ErrUnsupported: the file uses a component (model, normalizer, ...) this package does not implement.
	ErrUnsupported = errors.New("unsupported tokenizer component")
	// ErrTooLarge: an input file or table exceeds the package bounds.
	ErrTooLarge = errors.New("tokenizer file too large")
	// ErrUnsupportedTemplate: the chat template uses a construct outside the supported Jinja2 subset.
	ErrUnsupportedTemplate = errors.New("unsupported chat template")
	// ErrNoChatTemplate: tokenizer_config.json has no chat_template.
	ErrNoChatTemplate = errors.New("no chat template")
	// ErrTemplate: the chat template failed while rendering (including raise_exception).
	ErrTemplate = errors.New("chat template error")
)

// Bounds on untrusted input.
const (
	// MaxFileSize bounds tokenizer.json, tokenizer_config.json and chat_template.jinja (bytes).
	MaxFileSize = 64 << 20
	// MaxVocab bounds the number of vocabulary entries and the largest token id + 1.
	MaxVocab = 1 << 22
	// MaxAddedTokens bounds added_tokens.
	MaxAddedTokens = 1 << 16
)

const (
	fileTok = "tokenizer.json"
	fileCfg = "tokenizer_config.json"
)

// Message is one chat message for RenderChat.
type Message struct{ Role, Content string }

// Tokenizer is a loaded tokenizer. Immutable after construction; safe for concurrent use.
type Tokenizer struct {
	model    *bpeModel
	added    *addedVocab
	norm     normalizer // nil: none
	pre      preTokenizer
	post     postProcessor // nil: none
	dec      decoder       // nil: join tokens with " "
	idToTok  []string      // index: id; "" for unused ids
	special  []bool        // index: id
	bos      int32
	hasBOS   bool
	eos      []int32
	addBOS   *bool // tokenizer_config add_bos_token, nil when absent
	addEOS   *bool
	cleanup  bool // tokenizer_config clean_up_tokenization_spaces
	tmpl     string
	tmplOnce sync.Once
	tmplAST  []jnode
	tmplErr  error
	// tokenVars holds tokenizer_config *_token strings (bos_token, pad_token, ...), passed to
	// the chat template as transformers does.
	tokenVars map[string]string
	bosToken  string
	eosToken  string
}

// Load reads dir/tokenizer.json and, if present, dir/tokenizer_config.json and
// dir/chat_template.jinja (the latter overrides the config's chat_template, as transformers does).
func Load(dir string) (*Tokenizer, error) {
	data, err := readBounded(filepath.Join(dir, fileTok))
	if err != nil {
		return nil, err
	}
	cfg, err := readBounded(filepath.Join(dir, fileCfg))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	t, err := FromJSON(data, cfg)
	if err != nil {
		return nil, err
	}
	jt, err := readBounded(filepath.Join(dir, "chat_template.jinja"))
	if err == nil {
		t.tmpl = string(jt)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return t, nil
}

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > MaxFileSize {
		return nil, fmt.Errorf("%s: %d bytes exceeds limit of %d bytes: %w", filepath.Base(path), st.Size(), MaxFileSize, ErrTooLarge)
	}
	buf, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	if len(buf) > MaxFileSize {
		return nil, fmt.Errorf("%s: exceeds limit of %d bytes: %w", filepath.Base(path), MaxFileSize, ErrTooLarge)
	}
	return buf, nil
}

type jsonAddedToken struct {
	ID         *int64 `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized *bool  `json:"normalized"`
	Special    bool   `json:"special"`
}

type jsonTokenizer struct {
	AddedTokens   []jsonAddedToken `json:"added_tokens"`
	Normalizer    json.RawMessage  `json:"normalizer"`
	PreTokenizer  json.RawMessage  `json:"pre_tokenizer"`
	PostProcessor json.RawMessage  `json:"post_processor"`
	Decoder       json.RawMessage  `json:"decoder"`
	Model         json.RawMessage  `json:"model"`
}

func errf(base error, field, format string, args ...any) error {
	return fmt.Errorf("%s: %s: %s: %w", fileTok, field, fmt.Sprintf(format, args...), base)
}

// FromJSON builds a Tokenizer from tokenizer.json bytes and optional tokenizer_config.json
// bytes (nil or empty: no config). Neither slice is retained.
func FromJSON(data []byte, configJSON []byte) (*Tokenizer, error) {
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("%s: exceeds limit of %d bytes: %w", fileTok, MaxFileSize, ErrTooLarge)
	}
	if len(configJSON) > MaxFileSize {
		return nil, fmt.Errorf("%s: exceeds limit of %d bytes: %w", fileCfg, MaxFileSize, ErrTooLarge)
	}
	var jt jsonTokenizer
	if err := json.Unmarshal(data, &jt); err != nil {
		return nil, fmt.Errorf("%s: %v: %w", fileTok, err, ErrFormat)
	}
	if isNull(jt.Model) {
		return nil, errf(ErrFormat, "model", "missing")
	}
	t := &Tokenizer{}
	var err error
	if t.model, err = parseBPE(jt.Model); err != nil {
		return nil, err
	}
	if t.norm, err = parseNormalizer(jt.Normalizer, "normalizer", 0); err != nil {
		return nil, err
	}
	if t.pre, err = parsePreTokenizer(jt.PreTokenizer, "pre_tokenizer", 0); err != nil {
		return nil, err
	}
	t.pre = markLazy(t.pre)
	if t.post, err = parsePostProcessor(jt.PostProcessor, "post_processor", 0); err != nil {
		return nil, err
	}
	if t.dec, err = parseDecoder(jt.Decoder, "decoder", 0); err != nil {
		return nil, err
	}
	if len(jt.AddedTokens) > MaxAddedTokens {
		return nil, errf(ErrTooLarge, "added_tokens", "%d entries exceed limit %d", len(jt.AddedTokens), MaxAddedTokens)
	}
	maxID := len(t.model.vocabR) - 1
	toks := make([]addedToken, 0, len(jt.AddedTokens))
	seen := map[int32]bool{}
	for i, a := range jt.AddedTokens {
		field := fmt.Sprintf("added_tokens[%d]", i)
		if a.ID == nil {
			return nil, errf(ErrFormat, field+".id", "missing")
		}
		if *a.ID < 0 || *a.ID >= MaxVocab {
			return nil, errf(ErrFormat, field+".id", "%d out of range [0,%d)", *a.ID, MaxVocab)
		}
		if a.Content == "" {
			return nil, errf(ErrFormat, field+".content", "empty")
		}
		id := int32(*a.ID)
		if seen[id] {
			return nil, errf(ErrFormat, field+".id", "duplicate id %d", id)
		}
		seen[id] = true
		if mid, ok := t.model.vocab[a.Content]; ok && mid != id {
			return nil, errf(ErrFormat, field+".id", "%d but model.vocab has %q as %d", id, a.Content, mid)
		}
		norm := !a.Special
		if a.Normalized != nil {
			norm = *a.Normalized
		}
		toks = append(toks, addedToken{id: id, content: a.Content, singleWord: a.SingleWord,
			lstrip: a.LStrip, rstrip: a.RStrip, normalized: norm, special: a.Special})
		if int(id) > maxID {
			maxID = int(id)
		}
	}
	if lim := 2*(len(t.model.vocab)+len(toks)) + 1024; maxID >= lim {
		return nil, errf(ErrFormat, "added_tokens", "largest id %d leaves the id space too sparse for %d model and %d added tokens", maxID, len(t.model.vocab), len(toks))
	}
	if t.post != nil {
		pre, suf := t.post.wrap(nil, nil)
		for _, id := range append(pre, suf...) {
			if int(id) > maxID {
				return nil, errf(ErrFormat, "post_processor", "special token id %d is not a token id (vocab size %d)", id, maxID+1)
			}
		}
	}
	t.idToTok = make([]string, maxID+1)
	copy(t.idToTok, t.model.vocabR)
	t.special = make([]bool, maxID+1)
	for i := range toks {
		a := &toks[i]
		if a.normalized && t.norm != nil {
			a.match = t.norm.normalize(a.content)
		} else {
			a.match = a.content
		}
		t.idToTok[a.id] = a.content
		t.special[a.id] = a.special
	}
	t.added = newAddedVocab(toks)
	if err := t.applyConfig(configJSON); err != nil {
		return nil, err
	}
	return t, nil
}

func isNull(r json.RawMessage) bool {
	return len(r) == 0 || string(r) == "null"
}

// Encode tokenizes text. addSpecial applies the post-processor (e.g. BOS from
// TemplateProcessing) and tokenizer_config's add_bos_token/add_eos_token. The returned slice
// is owned by the caller.
func (t *Tokenizer) Encode(text string, addSpecial bool) []int32 {
	ids := t.encodeRaw(text, nil)
	if addSpecial {
		ids = t.postProcess(ids)
	}
	return ids
}

// Decode detokenizes ids; skipSpecial drops special added tokens. Ids outside the vocabulary
// are ignored (as HF tokenizers does).
func (t *Tokenizer) Decode(ids []int32, skipSpecial bool) string {
	s := t.decodeRaw(ids, skipSpecial)
	if t.cleanup {
		s = cleanUpTokenization(s)
	}
	return s
}

// VocabSize is max id + 1 over the model vocabulary and the added tokens (the embedding rows
// a model needs at least).
func (t *Tokenizer) VocabSize() int { return len(t.idToTok) }

// TokenID looks up a token string (added tokens first, then the model vocabulary).
func (t *Tokenizer) TokenID(s string) (int32, bool) {
	if id, ok := t.added.byContent[s]; ok {
		return id, true
	}
	id, ok := t.model.vocab[s]
	return id, ok
}

// Token returns the token string of id, "" when out of range or unused.
func (t *Tokenizer) Token(id int32) string {
	if id < 0 || int(id) >= len(t.idToTok) {
		return ""
	}
	return t.idToTok[id]
}

// BOS returns the beginning-of-sequence id, if any.
func (t *Tokenizer) BOS() (int32, bool) { return t.bos, t.hasBOS }

// EOS returns the end-of-sequence ids from tokenizer_config.json eos_token (possibly empty).
// The returned slice is a copy.
func (t *Tokenizer) EOS() []int32 { return append([]int32(nil), t.eos...) }

// IsSpecial reports whether id is a special added token.
func (t *Tokenizer) IsSpecial(id int32) bool {
	return id >= 0 && int(id) < len(t.special) && t.special[id]
}

// HasChatTemplate reports whether a chat template was found.
func (t *Tokenizer) HasChatTemplate() bool { return t.tmpl != "" }

// ChatTemplate returns the raw chat template source ("" when none).
func (t *Tokenizer) ChatTemplate() string { return t.tmpl }

// SpecialTokens returns the ids of all special added tokens, ascending.
func (t *Tokenizer) SpecialTokens() []int32 {
	var out []int32
	for id, s := range t.special {
		if s {
			out = append(out, int32(id))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
