package tokenizer

import (
	"bufio"
	"encoding/json"
	"os"
	"slices"
	"testing"
)

// TestSplitsMatchRegex compares the hand-written splitters with splits made by Python's
// `regex` module (testdata/gen_splits.py) for the same lookahead patterns.
func TestSplitsMatchRegex(t *testing.T) {
	f, err := os.Open("testdata/splits.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ms := map[string]matcher{
		"gpt2":   gpt2Matcher,
		"llama3": wholeMatcher(llama3At(3)),
		"qwen2":  wholeMatcher(llama3At(1)),
	}
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		var c struct {
			Pattern string
			Text    string
			Splits  []string
		}
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatal(err)
		}
		var got []string
		splitBy(piece{s: c.Text}, ms[c.Pattern], bIsolated, false, func(p piece) { got = append(got, p.s) })
		if !slices.Equal(got, c.Splits) {
			t.Errorf("%s %q:\n got %q\nwant %q", c.Pattern, c.Text, got, c.Splits)
		}
		n++
	}
	if n < 1000 {
		t.Fatalf("only %d cases", n)
	}
}

func TestCompileOnig(t *testing.T) {
	re, err := compileOnig(`\s+|[\d\w]+|\S`)
	if err != nil {
		t.Fatal(err)
	}
	got := re.FindAllString("a\u00a0\u3000١٢x_é!", -1)
	want := []string{"a", "\u00a0\u3000", "١٢x_é", "!"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	if _, err := compileOnig(`\s+(?!\S)`); err == nil {
		t.Error("lookahead compiled")
	}
}
