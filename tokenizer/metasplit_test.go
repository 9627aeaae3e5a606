package tokenizer

import (
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestMetaSplitExact checks that splitting long SentencePiece words before "▁" gives the
// same ids as merging the whole word (the reference path), on long mixed texts.
func TestMetaSplitExact(t *testing.T) {
	tk, err := Load("testdata/sentencepiece")
	if err != nil {
		t.Fatal(err)
	}
	if !tk.model.metaSplit {
		t.Fatal("sentencepiece golden tokenizer should qualify for metaSplit")
	}
	var texts []string
	if src, err := os.ReadFile(filepath.Join(runtime.GOROOT(), "src", "strings", "strings.go")); err == nil {
		texts = append(texts, string(src[:min(len(src), 20000)]))
	}
	rnd := rand.New(rand.NewSource(1))
	alpha := []string{"a", "b", "the", " ", "  ", "\n", "\t", "你好", "😀", "é", "1", "2", "▁", "▁▁", "func", "(", ")", "{", "}", ".", ",", "'s"}
	for i := 0; i < 200; i++ {
		var b strings.Builder
		for j := rnd.Intn(400); j >= 0; j-- {
			b.WriteString(alpha[rnd.Intn(len(alpha))])
		}
		texts = append(texts, b.String())
	}
	for _, text := range texts {
		w := tk.norm.normalize(text)
		got := tk.model.tokenize(nil, w)
		want := tk.model.mergeWord(nil, w)
		if !slices.Equal(got, want) {
			t.Fatalf("metaSplit differs for %q:\n got %v\nwant %v", text, got, want)
		}
	}
}
