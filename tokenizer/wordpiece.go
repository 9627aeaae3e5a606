package tokenizer

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// WordPiece is a BERT WordPiece tokenizer read from a Hugging Face
// tokenizer.json (model WordPiece, normalizer BertNormalizer, pre-tokenizer
// BertPreTokenizer). It is immutable and safe for concurrent use.
type WordPiece struct {
	vocab        map[string]int32
	unk          int32
	before       []int32 // special ids the post-processor puts before the text ([CLS])
	after        []int32 // and after it ([SEP]); both empty without a post-processor
	truncation   int     // tokenizer.json truncation.max_length; 0 = none
	prefix       string  // continuing_subword_prefix, "##"
	maxWordChars int

	cleanText, chineseChars, stripAccents, lowercase bool

	// added holds special/added tokens matched verbatim in the raw text,
	// longest first.
	added []wpAdded
}

type wpAdded struct {
	content string
	id      int32
}

type wpJSON struct {
	AddedTokens []struct {
		ID         int32  `json:"id"`
		Content    string `json:"content"`
		SingleWord bool   `json:"single_word"`
		Normalized bool   `json:"normalized"`
		Special    bool   `json:"special"`
	} `json:"added_tokens"`
	Normalizer *struct {
		Type               string `json:"type"`
		CleanText          *bool  `json:"clean_text"`
		HandleChineseChars *bool  `json:"handle_chinese_chars"`
		StripAccents       *bool  `json:"strip_accents"`
		Lowercase          *bool  `json:"lowercase"`
	} `json:"normalizer"`
	PreTokenizer *struct {
		Type string `json:"type"`
	} `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Truncation    *struct {
		Direction string `json:"direction"`
		MaxLength int    `json:"max_length"`
	} `json:"truncation"`
	Model struct {
		Type                    string           `json:"type"`
		UnkToken                string           `json:"unk_token"`
		ContinuingSubwordPrefix *string          `json:"continuing_subword_prefix"`
		MaxInputCharsPerWord    int              `json:"max_input_chars_per_word"`
		Vocab                   map[string]int32 `json:"vocab"`
	} `json:"model"`
}

// LoadWordPiece reads a WordPiece tokenizer.json (BERT family: the
// cache's sentence encoder). The byte-level/SentencePiece BPE tokenizers of
// generative models are Tokenizer (Load, FromJSON).
func LoadWordPiece(path string) (*WordPiece, error) {
	data, err := readBounded(path) // the bound of every tokenizer file: MaxFileSize
	if err != nil {
		return nil, fmt.Errorf("wordpiece: %w", err)
	}
	return ParseWordPiece(path, data)
}

// ParseWordPiece parses tokenizer.json content; name is used in errors.
func ParseWordPiece(name string, data []byte) (*WordPiece, error) {
	var tj wpJSON
	if err := json.Unmarshal(data, &tj); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrFormat, name, err)
	}
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s: %s", ErrFormat, name, field, fmt.Sprintf(format, args...))
	}
	m := tj.Model
	if m.Type != "WordPiece" {
		return nil, bad("model.type", "%q, want WordPiece", m.Type)
	}
	if len(m.Vocab) == 0 {
		return nil, bad("model.vocab", "empty")
	}
	t := &WordPiece{vocab: m.Vocab, prefix: "##", maxWordChars: m.MaxInputCharsPerWord,
		cleanText: true, chineseChars: true, lowercase: true}
	if m.ContinuingSubwordPrefix != nil {
		t.prefix = *m.ContinuingSubwordPrefix
	}
	if t.maxWordChars <= 0 {
		t.maxWordChars = 100
	}
	for tok, id := range m.Vocab {
		if id < 0 {
			return nil, bad("model.vocab", "token %q has negative id %d", tok, id)
		}
	}
	look := func(field, tok string) (int32, error) {
		id, ok := m.Vocab[tok]
		if !ok {
			return 0, bad(field, "token %q not in vocab", tok)
		}
		return id, nil
	}
	if m.UnkToken == "" {
		m.UnkToken = "[UNK]"
	}
	var err error
	if t.unk, err = look("model.unk_token", m.UnkToken); err != nil {
		return nil, err
	}
	if n := tj.Normalizer; n != nil {
		if n.Type != "BertNormalizer" {
			return nil, bad("normalizer.type", "%q, want BertNormalizer", n.Type)
		}
		set := func(dst *bool, p *bool) {
			if p != nil {
				*dst = *p
			}
		}
		set(&t.cleanText, n.CleanText)
		set(&t.chineseChars, n.HandleChineseChars)
		set(&t.lowercase, n.Lowercase)
		t.stripAccents = t.lowercase // strip_accents: null follows lowercase
		set(&t.stripAccents, n.StripAccents)
	} else {
		t.cleanText, t.chineseChars, t.lowercase = false, false, false
	}
	if p := tj.PreTokenizer; p != nil && p.Type != "BertPreTokenizer" {
		return nil, bad("pre_tokenizer.type", "%q, want BertPreTokenizer", p.Type)
	}
	if err := t.parsePostProcessor(name, tj.PostProcessor); err != nil {
		return nil, err
	}
	if tr := tj.Truncation; tr != nil {
		if tr.Direction != "" && tr.Direction != "Right" {
			return nil, bad("truncation.direction", "%q, want Right", tr.Direction)
		}
		if tr.MaxLength < 0 || tr.MaxLength > 1<<20 {
			return nil, bad("truncation.max_length", "%d", tr.MaxLength)
		}
		t.truncation = tr.MaxLength
	}
	for _, a := range tj.AddedTokens {
		if a.Content == "" || a.Normalized {
			continue // tokens matched after normalization are not supported; BERT's specials are not normalized
		}
		t.added = append(t.added, wpAdded{a.Content, a.ID})
	}
	sort.SliceStable(t.added, func(i, j int) bool { return len(t.added[i].content) > len(t.added[j].content) })
	return t, nil
}

// VocabSize returns 1 + the largest id of the vocabulary.
func (t *WordPiece) VocabSize() int {
	n := int32(0)
	for _, id := range t.vocab {
		n = max(n, id+1)
	}
	return int(n)
}

// Encode returns the ids of text as the Hugging Face tokenizer does with
// add_special_tokens: the post-processor's specials (for BERT [CLS] … [SEP];
// none when tokenizer.json has no post-processor) around the WordPiece ids,
// truncated on the right so that the whole sequence has at most maxLen ids
// (the specials are kept). maxLen ≤ 0 means no limit. The result is a new
// slice owned by the caller.
func (t *WordPiece) Encode(text string, maxLen int) []int32 {
	budget := -1 // text tokens allowed; -1 = unlimited
	if maxLen > 0 {
		budget = max(maxLen-len(t.before)-len(t.after), 0)
	}
	ids := append([]int32(nil), t.before...)
	n0 := len(ids)
	for _, seg := range t.splitAdded(text) {
		if budget >= 0 && len(ids)-n0 >= budget {
			break
		}
		if seg.id >= 0 {
			ids = append(ids, seg.id)
			continue
		}
		for _, w := range t.preTokenize(t.normalize(seg.text)) {
			ids = t.wordPiece(ids, w)
			if budget >= 0 && len(ids)-n0 >= budget {
				break
			}
		}
	}
	if budget >= 0 && len(ids)-n0 > budget {
		ids = ids[:n0+budget]
	}
	return append(ids, t.after...)
}

// Truncation returns tokenizer.json's truncation.max_length (0 = none).
func (t *WordPiece) Truncation() int { return t.truncation }

// parsePostProcessor fills before/after from the post-processor: the
// package's own parser (post.go), restricted to what a BERT tokenizer uses
// (BertProcessing or a single-sequence TemplateProcessing), with every
// special id checked against the vocabulary.
func (t *WordPiece) parsePostProcessor(name string, raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	typ, err := componentType(raw, "post_processor")
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if typ != "BertProcessing" && typ != "TemplateProcessing" {
		return fmt.Errorf("%w: %s: post_processor.type: %q, want BertProcessing, TemplateProcessing or null", ErrFormat, name, typ)
	}
	p, err := parsePostProcessor(raw, "post_processor", 0)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	t.before, t.after = p.wrap(nil, nil)
	n := t.VocabSize()
	for _, id := range append(append([]int32(nil), t.before...), t.after...) {
		if id < 0 || int(id) >= n {
			return fmt.Errorf("%w: %s: post_processor: special id %d not in the vocabulary (size %d)", ErrFormat, name, id, n)
		}
	}
	return nil
}

// Tokens returns the vocabulary strings of ids (for debugging and tests).
func (t *WordPiece) Tokens(ids []int32) []string {
	inv := make(map[int32]string, len(t.vocab))
	for s, id := range t.vocab {
		inv[id] = s
	}
	for _, a := range t.added {
		inv[a.id] = a.content
	}
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = inv[id]
	}
	return out
}

type wpSegment struct {
	text string
	id   int32 // ≥ 0: an added token
}

// splitAdded cuts text at verbatim occurrences of added tokens (leftmost,
// longest first), as the Hugging Face tokenizer does before normalizing.
func (t *WordPiece) splitAdded(text string) []wpSegment {
	if len(t.added) == 0 {
		return []wpSegment{{text, -1}}
	}
	var out []wpSegment
	start := 0
	for i := 0; i < len(text); {
		matched := false
		for _, a := range t.added {
			if strings.HasPrefix(text[i:], a.content) {
				if start < i {
					out = append(out, wpSegment{text[start:i], -1})
				}
				out = append(out, wpSegment{a.content, a.id})
				i += len(a.content)
				start = i
				matched = true
				break
			}
		}
		if !matched {
			_, size := utf8.DecodeRuneInString(text[i:])
			i += size
		}
	}
	if start < len(text) {
		out = append(out, wpSegment{text[start:], -1})
	}
	return out
}

// normalize applies BertNormalizer: clean text, space out CJK characters,
// strip accents (NFD, drop Mn), lowercase — in that order.
func (t *WordPiece) normalize(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 8)
	for _, r := range s {
		if t.cleanText {
			if r == 0 || r == 0xFFFD || isControl(r) {
				continue
			}
			if isWhitespace(r) {
				b.WriteByte(' ')
				continue
			}
		}
		if t.chineseChars && isChineseChar(r) {
			b.WriteByte(' ')
			b.WriteRune(r)
			b.WriteByte(' ')
			continue
		}
		b.WriteRune(r)
	}
	s = b.String()
	if t.stripAccents {
		s = norm.NFD.String(s)
		b.Reset()
		for _, r := range s {
			if !unicode.Is(unicode.Mn, r) {
				b.WriteRune(r)
			}
		}
		s = b.String()
	}
	if t.lowercase {
		s = lowerFull(s)
	}
	return s
}

// lowerFull lowercases rune by rune with Unicode's full mapping, as Rust's
// char::to_lowercase (used by the tokenizers crate) does: the only
// unconditional multi-rune lowercase mapping is U+0130 İ → "i\u0307";
// there is no final-sigma rule, since each rune is mapped on its own.
func lowerFull(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		if r == 0x130 {
			b.WriteString("i\u0307")
			continue
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// preTokenize applies BertPreTokenizer: split on whitespace (dropped) and
// around every punctuation character (kept as its own word).
func (t *WordPiece) preTokenize(s string) []string {
	var words []string
	start := -1
	for i, r := range s {
		switch {
		case unicode.IsSpace(r):
			if start >= 0 {
				words = append(words, s[start:i])
				start = -1
			}
		case isPunct(r):
			if start >= 0 {
				words = append(words, s[start:i])
				start = -1
			}
			words = append(words, s[i:i+utf8.RuneLen(r)])
		default:
			if start < 0 {
				start = i
			}
		}
	}
	if start >= 0 {
		words = append(words, s[start:])
	}
	return words
}

// wordPiece appends the greedy longest-match-first pieces of word to ids, or
// [UNK] when the word is too long or cannot be covered.
func (t *WordPiece) wordPiece(ids []int32, word string) []int32 {
	if utf8.RuneCountInString(word) > t.maxWordChars {
		return append(ids, t.unk)
	}
	n0 := len(ids)
	for start := 0; start < len(word); {
		end := len(word)
		found := int32(-1)
		for end > start {
			piece := word[start:end]
			if start > 0 {
				piece = t.prefix + piece
			}
			if id, ok := t.vocab[piece]; ok {
				found = id
				break
			}
			_, size := utf8.DecodeLastRuneInString(word[start:end])
			end -= size
		}
		if found < 0 {
			return append(ids[:n0], t.unk)
		}
		ids = append(ids, found)
		start = end
	}
	return ids
}

// isWhitespace is the tokenizers crate's notion for clean_text.
func isWhitespace(r rune) bool {
	switch r {
	case ' ', '\t', '\n', '\r':
		return true
	}
	return unicode.Is(unicode.Zs, r)
}

// isControl: \t \n \r are whitespace, not control; otherwise categories
// Cc, Cf, Co, Cs and unassigned (Cn).
func isControl(r rune) bool {
	switch r {
	case '\t', '\n', '\r':
		return false
	}
	if unicode.In(r, unicode.Cc, unicode.Cf, unicode.Co, unicode.Cs) {
		return true
	}
	return !unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Z)
}

// isPunct: ASCII punctuation (including symbols like $ + < = > ^ ` | ~) or
// any Unicode punctuation category.
func isPunct(r rune) bool {
	if r < 128 {
		return r >= 33 && r <= 47 || r >= 58 && r <= 64 || r >= 91 && r <= 96 || r >= 123 && r <= 126
	}
	return unicode.IsPunct(r)
}

func isChineseChar(r rune) bool {
	return r >= 0x4E00 && r <= 0x9FFF ||
		r >= 0x3400 && r <= 0x4DBF ||
		r >= 0x20000 && r <= 0x2A6DF ||
		r >= 0x2A700 && r <= 0x2B73F ||
		r >= 0x2B740 && r <= 0x2B81F ||
		r >= 0x2B920 && r <= 0x2CEAF ||
		r >= 0xF900 && r <= 0xFAFF ||
		r >= 0x2F800 && r <= 0x2FA1F
}
