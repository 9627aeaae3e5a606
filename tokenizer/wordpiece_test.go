package tokenizer

import (
	"errors"
	"os"
	"strings"
	"testing"
)

func loadTiny(t *testing.T) *WordPiece {
	t.Helper()
	tok, err := LoadWordPiece("testdata/wordpiece-tiny/tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// The expectations follow the Hugging Face BertNormalizer +
// BertPreTokenizer + WordPiece rules, worked out by hand for the 32-token
// vocabulary of testdata/wordpiece-tiny/tokenizer.json.
func TestWordPieceEncode(t *testing.T) {
	tok := loadTiny(t)
	for _, tc := range []struct {
		name, in, want string
		maxLen         int
	}{
		{"punctuation split", "Hello, World!", "[CLS] hello , world ! [SEP]", 0},
		{"wordpiece", "unaffable", "[CLS] un ##aff ##able [SEP]", 0},
		{"unknown whole word", "unaffablex", "[CLS] [UNK] [SEP]", 0},
		{"suffix", "cats", "[CLS] cat ##s [SEP]", 0},
		{"accents stripped", "NANDÚ Ñandu", "[CLS] nandu nandu [SEP]", 0},
		{"decomposed accent", "cafe\u0301", "[CLS] caf ##e [SEP]", 0},
		{"cjk split", "中文", "[CLS] 中 文 [SEP]", 0},
		{"cjk inside word", "a中bc", "[CLS] a 中 bc [SEP]", 0},
		{"control removed, whitespace kept", "a\tb\x00c\u200b", "[CLS] a bc [SEP]", 0},
		{"ascii symbols are punctuation", "$5+3", "[CLS] $ 5 + 3 [SEP]", 0},
		{"hyphen", "well-known", "[CLS] well - known [SEP]", 0},
		{"added token verbatim", "hello [MASK] world", "[CLS] hello [MASK] world [SEP]", 0},
		{"added token glued", "hello[MASK]world", "[CLS] hello [MASK] world [SEP]", 0},
		{"lowercased special is text", "[mask]", "[CLS] [UNK] [UNK] [UNK] [SEP]", 0},
		{"too long word", "aaaaaaaaaaaaa", "[CLS] [UNK] [SEP]", 0},
		{"empty", "", "[CLS] [SEP]", 0},
		{"only spaces", " \n\t ", "[CLS] [SEP]", 0},
		{"no-break space", "hello\u00a0world", "[CLS] hello world [SEP]", 0},
		{"truncation", "hello world hello world", "[CLS] hello world [SEP]", 4},
		{"truncation mid word", "unaffable", "[CLS] un ##aff [SEP]", 4},
		{"truncation minimum", "hello", "[CLS] [SEP]", 1},
	} {
		maxLen := tc.maxLen
		if maxLen == 0 {
			maxLen = 512
		}
		ids := tok.Encode(tc.in, maxLen)
		if got := strings.Join(tok.Tokens(ids), " "); got != tc.want {
			t.Errorf("%s: Encode(%q) = %q, want %q", tc.name, tc.in, got, tc.want)
		}
	}
}

func TestWordPieceIDs(t *testing.T) {
	tok := loadTiny(t)
	ids := tok.Encode("Hello, World!", 512)
	want := []int32{2, 5, 7, 6, 8, 3}
	if len(ids) != len(want) {
		t.Fatalf("ids = %v, want %v", ids, want)
	}
	for i := range want {
		if ids[i] != want[i] {
			t.Fatalf("ids = %v, want %v", ids, want)
		}
	}
	if tok.VocabSize() != 32 {
		t.Fatalf("VocabSize = %d", tok.VocabSize())
	}
}

func TestWordPieceNoStripAccents(t *testing.T) {
	data := strings.Replace(readWP(t, "testdata/wordpiece-tiny/tokenizer.json"), `"strip_accents": null`, `"strip_accents": false`, 1)
	tok, err := ParseWordPiece("inline", []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	// İ lowercases to i + U+0307 (kept without accent stripping), Σ to σ at
	// the end of a word too (no final-sigma rule).
	if got := tok.normalize("İΣ"); got != "i\u0307σ" {
		t.Fatalf("normalize(İΣ) = %q", got)
	}
	// é stays (lowercased É), so "café" is caf + é (é is a whole-word token, not ##é).
	if got := strings.Join(tok.Tokens(tok.Encode("CAFÉ é", 64)), " "); got != "[CLS] [UNK] é [SEP]" {
		t.Fatalf("got %q", got)
	}
}

func TestWordPieceErrors(t *testing.T) {
	base := readWP(t, "testdata/wordpiece-tiny/tokenizer.json")
	for name, data := range map[string]string{
		"not json":         "{",
		"bpe model":        strings.Replace(base, `"type": "WordPiece",`+"\n  \"unk_token\"", `"type": "BPE",`+"\n  \"unk_token\"", 1),
		"unk missing":      strings.Replace(base, `"unk_token": "[UNK]"`, `"unk_token": "<unk>"`, 1),
		"other normalizer": strings.Replace(base, `"type": "BertNormalizer"`, `"type": "NFKC"`, 1),
	} {
		if _, err := ParseWordPiece(name, []byte(data)); !errors.Is(err, ErrFormat) {
			t.Errorf("%s: got %v, want ErrFormat", name, err)
		}
	}
}

func TestWordPiecePostProcessors(t *testing.T) {
	base := readWP(t, "testdata/wordpiece-tiny/tokenizer.json")
	start := strings.Index(base, `"post_processor": {`)
	end := strings.Index(base, `"decoder":`)
	with := func(pp string) string { return base[:start] + `"post_processor": ` + pp + ",\n " + base[end:] }
	for _, tc := range []struct {
		name, pp, want string
	}{
		{"null", "null", "hello world"},
		{"bert", `{"type":"BertProcessing","sep":["[SEP]",3],"cls":["[CLS]",2]}`, "[CLS] hello world [SEP]"},
		{"template with two prefixes", `{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"[CLS]","type_id":0}},{"SpecialToken":{"id":"[MASK]","type_id":0}},{"Sequence":{"id":"A","type_id":0}}],"special_tokens":{"[CLS]":{"ids":[2]},"[MASK]":{"ids":[4]}}}`, "[CLS] [MASK] hello world"},
	} {
		tok, err := ParseWordPiece(tc.name, []byte(with(tc.pp)))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := strings.Join(tok.Tokens(tok.Encode("Hello world", 0)), " "); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
	// Without specials, truncation counts text tokens only.
	tok, _ := ParseWordPiece("null", []byte(with("null")))
	if got := strings.Join(tok.Tokens(tok.Encode("unaffable hello", 2)), " "); got != "un ##aff" {
		t.Errorf("truncation without specials: %q", got)
	}
	for name, pp := range map[string]string{
		"roberta":          `{"type":"RobertaProcessing","sep":["[SEP]",3],"cls":["[CLS]",2]}`,
		"unknown special":  `{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}},{"Sequence":{"id":"A","type_id":0}}],"special_tokens":{}}`,
		"no sequence":      `{"type":"TemplateProcessing","single":[],"special_tokens":{}}`,
		"id outside vocab": `{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"[CLS]","type_id":0}},{"Sequence":{"id":"A","type_id":0}}],"special_tokens":{"[CLS]":{"ids":[99999]}}}`,
		"bytelevel":        `{"type":"ByteLevel","trim_offsets":true}`,
	} {
		if _, err := ParseWordPiece(name, []byte(with(pp))); !errors.Is(err, ErrFormat) {
			t.Errorf("%s: got %v, want ErrFormat", name, err)
		}
	}
	tr := strings.Replace(base, `"truncation": null`, `"truncation": {"direction": "Right", "max_length": 5, "strategy": "LongestFirst", "stride": 0}`, 1)
	tok, err := ParseWordPiece("trunc", []byte(tr))
	if err != nil || tok.Truncation() != 5 {
		t.Fatalf("truncation: %v %v", tok, err)
	}
	tr = strings.Replace(tr, `"Right"`, `"Left"`, 1)
	if _, err := ParseWordPiece("left", []byte(tr)); !errors.Is(err, ErrFormat) {
		t.Fatalf("left truncation: %v", err)
	}
}

// FuzzWordPieceEncode: any input gives [CLS] … [SEP] within maxLen, with ids from
// the vocabulary, without panicking.
func FuzzWordPieceEncode(f *testing.F) {
	for _, s := range []string{"", "Hello, World!", "中文 café", "[MASK][MASK]", "\x00\xff\u200b", "unaffable unaffable"} {
		f.Add(s, 8)
	}
	tok, err := LoadWordPiece("testdata/wordpiece-tiny/tokenizer.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s string, maxLen int) {
		maxLen = maxLen%40 + 1
		ids := tok.Encode(s, maxLen)
		if ids[0] != 2 || ids[len(ids)-1] != 3 {
			t.Fatalf("Encode(%q) = %v: missing [CLS]/[SEP]", s, ids)
		}
		if maxLen >= 2 && len(ids) > maxLen {
			t.Fatalf("Encode(%q, %d) has %d ids", s, maxLen, len(ids))
		}
		for _, id := range ids {
			if id < 0 || id >= 32 {
				t.Fatalf("id %d outside the vocabulary", id)
			}
		}
	})
}

func readWP(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
