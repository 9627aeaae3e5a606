package bert

import (
	"errors"
	"fmt"

	"github.com/specgate/specgate/tokenizer"
)

// Tokenizer is the BERT WordPiece tokenizer, which lives with the other
// Hugging Face tokenizer.json readers in package tokenizer.
type Tokenizer = tokenizer.WordPiece

// LoadTokenizer reads a WordPiece tokenizer.json (tokenizer.LoadWordPiece);
// a malformed file is an error wrapping ErrFormat too.
func LoadTokenizer(path string) (*Tokenizer, error) {
	t, err := tokenizer.LoadWordPiece(path)
	if errors.Is(err, tokenizer.ErrFormat) {
		return nil, fmt.Errorf("%w: %w", ErrFormat, err)
	}
	return t, err
}
