package engine

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/specgate/specgate/tokenizer"
)

// charTokenizer is a 61-token character-level tokenizer (one char per id).
func charTokenizer(t *testing.T) (*tokenizer.Tokenizer, []string) {
	t.Helper()
	var chars []string
	for c := 'a'; c <= 'z'; c++ {
		chars = append(chars, string(c))
	}
	for c := 'A'; c <= 'Z'; c++ {
		chars = append(chars, string(c))
	}
	chars = append(chars, "_", ".", ",", "!", "#0", "?", "-", "'", ":")
	vocab := map[string]int{}
	for i, c := range chars {
		vocab[c] = i
	}
	js, _ := json.Marshal(map[string]any{
		"version": "1.0",
		"model":   map[string]any{"type": "BPE", "vocab": vocab, "merges": []string{}},
		"decoder": map[string]any{"type": "Fuse"},
	})
	tok, err := tokenizer.FromJSON(js, nil)
	if err != nil {
		t.Skipf("tokenizer unavailable: %v", err)
	}
	return tok, chars
}

// TestStopSequences: generation ends at the first stop string, which is never
// emitted; text that may begin a stop string is held back, then released.
func TestStopSequences(t *testing.T) {
	tok, chars := charTokenizer(t)
	m := NewRandomModel(genConfig(), 41, LoadOptions{KVTokens: 2048, BlockSize: 4, Threads: 2})
	m.Tokenizer = tok
	e := New(m, Options{})
	defer e.Close()
	prompt := []int32{1, 2, 3, 4, 5}
	ids := manualGreedy(t, m, prompt, 40)
	var full strings.Builder
	for _, id := range ids {
		full.WriteString(chars[id])
	}
	text := full.String()
	if got := tok.Decode(ids, false); got != text {
		t.Skipf("tokenizer decodes %q, not the plain concatenation %q", got, text)
	}
	run := func(stops []string, max int) (string, []string, Result) {
		var b strings.Builder
		var chunks []string
		res, err := e.Generate(context.Background(), GenerateRequest{Prompt: prompt, MaxTokens: max, Stop: stops}, func(c Chunk) error {
			b.WriteString(c.Text)
			chunks = append(chunks, c.Text)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return b.String(), chunks, res
	}
	stop := text[12:15]
	first := strings.Index(text, stop)
	got, _, res := run([]string{"never", stop}, 40)
	if got != text[:first] || res.Finish != FinishStop {
		t.Fatalf("stop %q: got %q (%s), want %q", stop, got, res.Finish, text[:first])
	}
	// a stop string whose prefix appears but never completes: held back, then released in full.
	partial := text[20:22] + "#"
	got, chunks, res := run([]string{partial}, 40)
	if got != text || res.Finish != FinishLength {
		t.Fatalf("partial stop: got %q (%s), want %q", got, res.Finish, text)
	}
	// text ending in a prefix of the stop string is never a chunk boundary.
	n := 0
	for _, c := range chunks {
		n += len(c)
		if n == 21 || n == 22 {
			t.Fatalf("chunk boundary at %d released %q, a prefix of stop %q", n, text[20:n], partial)
		}
	}
	// EOS (a stop token) right after text held back for a stop string: the held text is released.
	k := 25
	for k < len(ids) && strings.IndexByte(text[:k], text[k]) >= 0 {
		k++ // want a token whose first occurrence is at k
	}
	if k < len(ids) {
		var b strings.Builder
		res, err := e.Generate(context.Background(), GenerateRequest{Prompt: prompt, MaxTokens: 40, StopTokenIDs: []int32{ids[k]},
			Stop: []string{text[k-1:k] + "#"}}, func(c Chunk) error { b.WriteString(c.Text); return nil })
		if err != nil || b.String() != text[:k] || res.Finish != FinishStop {
			t.Fatalf("EOS after held text: got %q (%s, %v), want %q", b.String(), res.Finish, err, text[:k])
		}
	}
	// stop string at the very first token
	got, _, res = run([]string{text[:1]}, 40)
	if got != "" || res.Finish != FinishStop || res.CompletionTokens != 1 {
		t.Fatalf("stop at first token: got %q %+v", got, res)
	}
}
