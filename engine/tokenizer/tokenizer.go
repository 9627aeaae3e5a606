// Package tokenizer implements Hugging Face tokenizer.json tokenizers in pure Go:
// byte-level BPE (GPT-2 / Llama-3 style) and SentencePiece-style BPE (Llama-2 style with
// Metaspace and byte fallback), added/special tokens, the normalizers, pre-tokenizers,
// post-processors and decoders these families use, streaming detokenization, and a small
// Jinja2-subset interpreter for chat templates from tokenizer_config.json.
//
// A *Tokenizer is immutable after Load/FromJSON and safe for concurrent use by many
// goroutines; a *StreamDecoder is not (one per sequence).
package tokenizer

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Sentinel errors. Returned errors wrap one of these and name the file and field.
var (
	// ErrFormat: tokenizer.json / tokenizer_config.json is malformed or inconsistent.
	ErrFormat = errors.New("tokenizer: malformed tokenizer file")
	// ErrUnsupported: the file uses a component (model, normalizer, ...) this package does not implement.
	ErrUnsupported = errors.New("tokenizer: unsupported component")
	// ErrTooLarge: an input file exceeds MaxFileSize.
	ErrTooLarge = errors.New("tokenizer: file too large")
	// ErrUnsupportedTemplate: the chat template uses a construct outside the supported Jinja2 subset.
	ErrUnsupportedTemplate = errors.New("tokenizer: unsupported chat template")
	// ErrNoChatTemplate: tokenizer_config.json has no chat_template.
	ErrNoChatTemplate = errors.New("tokenizer: no chat template")
	// ErrTemplate: the chat template failed while rendering (including raise_exception).
	ErrTemplate = errors.New("tokenizer: chat template error")
)

// MaxFileSize bounds tokenizer.json and tokenizer_config.json (bytes).
const MaxFileSize = 64 << 20

// Message is one chat message for RenderChat.
type Message struct{ Role, Content string }

// Load reads dir/tokenizer.json and, if present, dir/tokenizer_config.json.
func Load(dir string) (*Tokenizer, error) {
	data, err := readBounded(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, err
	}
	cfg, err := readBounded(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return FromJSON(data, cfg)
}

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > MaxFileSize {
		return nil, fmt.Errorf("%s: %d bytes exceeds limit %d: %w", filepath.Base(path), st.Size(), MaxFileSize, ErrTooLarge)
	}
	buf, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	if len(buf) > MaxFileSize {
		return nil, fmt.Errorf("%s: exceeds limit %d bytes: %w", filepath.Base(path), MaxFileSize, ErrTooLarge)
	}
	return buf, nil
}
