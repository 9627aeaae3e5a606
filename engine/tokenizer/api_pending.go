package tokenizer

import "errors"

// Tokenizer is a loaded tokenizer. Immutable; safe for concurrent use.
type Tokenizer struct {
	vocab   map[string]int32
	idToTok []string
	special map[int32]bool
	bos     int32
	hasBOS  bool
	eos     []int32
	tmpl    string
}

// StreamDecoder turns a stream of ids into text, emitting only complete UTF-8.
type StreamDecoder struct {
	t    *Tokenizer
	skip bool
	ids  []int32
	sent int
}

var errPending = errors.New("tokenizer: implementation in progress")

// FromJSON builds a Tokenizer from tokenizer.json bytes and optional tokenizer_config.json bytes (nil allowed).
func FromJSON(data []byte, configJSON []byte) (*Tokenizer, error) { return nil, errPending }

// Encode tokenizes text. addSpecial adds BOS etc. per post_processor / add_bos_token.
func (t *Tokenizer) Encode(text string, addSpecial bool) []int32 { return nil }

// Decode detokenizes ids; skipSpecial drops special tokens.
func (t *Tokenizer) Decode(ids []int32, skipSpecial bool) string { return "" }

// VocabSize is the number of ids (model vocab plus added tokens): max id + 1.
func (t *Tokenizer) VocabSize() int { return len(t.idToTok) }

// TokenID looks up a token string.
func (t *Tokenizer) TokenID(s string) (int32, bool) { id, ok := t.vocab[s]; return id, ok }

// Token returns the token string of id, "" when out of range.
func (t *Tokenizer) Token(id int32) string {
	if id < 0 || int(id) >= len(t.idToTok) {
		return ""
	}
	return t.idToTok[id]
}

// BOS returns the beginning-of-sequence id, if any.
func (t *Tokenizer) BOS() (int32, bool) { return t.bos, t.hasBOS }

// EOS returns the end-of-sequence ids (from tokenizer_config eos_token; generation_config may add more).
func (t *Tokenizer) EOS() []int32 { return t.eos }

// IsSpecial reports whether id is a special added token.
func (t *Tokenizer) IsSpecial(id int32) bool { return t.special[id] }

// NewDecoder starts a streaming decoder.
func (t *Tokenizer) NewDecoder(skipSpecial bool) *StreamDecoder {
	return &StreamDecoder{t: t, skip: skipSpecial}
}

// Add appends id and returns newly completed text.
func (d *StreamDecoder) Add(id int32) string { return "" }

// Flush returns any remaining text (incomplete UTF-8 becomes U+FFFD).
func (d *StreamDecoder) Flush() string { return "" }

// HasChatTemplate reports whether tokenizer_config.json had a chat_template.
func (t *Tokenizer) HasChatTemplate() bool { return t.tmpl != "" }

// RenderChat renders the chat template.
func (t *Tokenizer) RenderChat(msgs []Message, addGenerationPrompt bool) (string, error) {
	return "", errPending
}
