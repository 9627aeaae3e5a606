package tokenizer

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

type goldenCase struct {
	Text       string  `json:"text"`
	IDs        []int32 `json:"ids"`
	IDsSpecial []int32 `json:"ids_special"`
	Decoded    string  `json:"decoded"`
}

func readGolden(t *testing.T, dir string) []goldenCase {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "golden.jsonl"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			t.Skipf("%s: no golden.jsonl", dir)
		}
		t.Fatal(err)
	}
	defer f.Close()
	var out []goldenCase
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var c goldenCase
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestGolden checks encode (with and without special tokens), decode and streaming decode
// against HF tokenizers outputs for every golden string.
func TestGolden(t *testing.T) {
	for _, name := range []string{"specgate", "gpt2style", "sentencepiece"} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join("testdata", name)
			tk, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			cases := readGolden(t, dir)
			var enc, encS, dec, stream int
			for i, c := range cases {
				if got := tk.Encode(c.Text, false); slices.Equal(got, c.IDs) {
					enc++
				} else {
					t.Errorf("%d Encode(%q):\n got %v\nwant %v", i, c.Text, got, c.IDs)
				}
				if got := tk.Encode(c.Text, true); slices.Equal(got, c.IDsSpecial) {
					encS++
				} else {
					t.Errorf("%d Encode(%q, special):\n got %v\nwant %v", i, c.Text, got, c.IDsSpecial)
				}
				if got := tk.Decode(c.IDs, false); got == c.Decoded {
					dec++
				} else {
					t.Errorf("%d Decode(%v):\n got %q\nwant %q", i, c.IDs, got, c.Decoded)
				}
				for _, ids := range [][]int32{c.IDs, c.IDsSpecial} {
					for _, skip := range []bool{false, true} {
						sd := tk.NewDecoder(skip)
						var b strings.Builder
						for _, id := range ids {
							s := sd.Add(id)
							if !utf8.ValidString(s) {
								t.Errorf("%d stream chunk %q is invalid UTF-8", i, s)
							}
							b.WriteString(s)
						}
						b.WriteString(sd.Flush())
						if want := tk.Decode(ids, skip); b.String() != want {
							t.Errorf("%d stream(skip=%v) = %q, Decode = %q", i, skip, b.String(), want)
						} else {
							stream++
						}
					}
				}
			}
			t.Logf("%s: %d strings; encode %d, encode+special %d, decode %d, stream %d/%d equal",
				name, len(cases), enc, encS, dec, stream, 4*len(cases))
			if len(cases) < 500 {
				t.Errorf("only %d golden strings", len(cases))
			}
		})
	}
}
