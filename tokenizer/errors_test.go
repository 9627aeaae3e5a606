package tokenizer

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// mutate decodes the fixture, applies f, and re-encodes.
func mutate(t *testing.T, base []byte, f func(m map[string]any)) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(base, &m); err != nil {
		t.Fatal(err)
	}
	f(m)
	return mustJSON(t, m)
}

func TestMalformed(t *testing.T) {
	bl := byteLevelFixture(t, true)
	sp := spFixture(t, false)
	model := func(m map[string]any) map[string]any { return m["model"].(map[string]any) }
	cases := []struct {
		name string
		data []byte
		cfg  string
		base error
		want string
	}{
		{"not json", []byte("{"), "", ErrFormat, "tokenizer.json: "},
		{"no model", mutate(t, bl, func(m map[string]any) { delete(m, "model") }), "", ErrFormat, "tokenizer.json: model: missing"},
		{"unigram", mutate(t, bl, func(m map[string]any) { model(m)["type"] = "Unigram" }), "", ErrUnsupported, "tokenizer.json: model.type"},
		{"merge left", mutate(t, bl, func(m map[string]any) { model(m)["merges"].([]any)[1] = []any{"zz", "r"} }), "", ErrFormat, `tokenizer.json: model.merges[1]: left part "zz"`},
		{"merge right legacy", mutate(t, sp, func(m map[string]any) { model(m)["merges"].([]any)[2] = "e q" }), "", ErrFormat, `tokenizer.json: model.merges[2]: right part "q"`},
		{"merge result", mutate(t, bl, func(m map[string]any) { model(m)["merges"].([]any)[0] = []any{"x", "y"} }), "", ErrFormat, `tokenizer.json: model.merges[0]: merged token "xy"`},
		{"merge dup", mutate(t, bl, func(m map[string]any) { model(m)["merges"].([]any)[3] = []any{"o", "r"} }), "", ErrFormat, "tokenizer.json: model.merges[3]: duplicate of model.merges[1]"},
		{"merge shape", mutate(t, bl, func(m map[string]any) { model(m)["merges"].([]any)[0] = []any{"a"} }), "", ErrFormat, "tokenizer.json: model.merges[0]"},
		{"vocab negative", mutate(t, bl, func(m map[string]any) { model(m)["vocab"].(map[string]any)["Hello"] = -3 }), "", ErrFormat, `tokenizer.json: model.vocab: token "Hello" has id -3`},
		{"vocab dup id", mutate(t, bl, func(m map[string]any) { model(m)["vocab"].(map[string]any)["Hello"] = 5 }), "", ErrFormat, "tokenizer.json: model.vocab: id 5 used by both"},
		{"vocab sparse", mutate(t, bl, func(m map[string]any) { model(m)["vocab"].(map[string]any)["zzz"] = 4000000 }), "", ErrFormat, "tokenizer.json: model.vocab: largest id 4000000"},
		{"unk missing", mutate(t, sp, func(m map[string]any) { model(m)["unk_token"] = "<nope>" }), "", ErrFormat, "tokenizer.json: model.unk_token"},
		{"added id missing", mutate(t, bl, func(m map[string]any) { delete(m["added_tokens"].([]any)[1].(map[string]any), "id") }), "", ErrFormat, "tokenizer.json: added_tokens[1].id: missing"},
		{"added id conflict", mutate(t, bl, func(m map[string]any) { m["added_tokens"].([]any)[0].(map[string]any)["content"] = "Hello" }), "", ErrFormat, "tokenizer.json: added_tokens[0].id: 266 but model.vocab has"},
		{"added dup", mutate(t, bl, func(m map[string]any) { m["added_tokens"].([]any)[2].(map[string]any)["id"] = 266 }), "", ErrFormat, "tokenizer.json: added_tokens[2].id: duplicate id 266"},
		{"lookahead regex", mutate(t, bl, func(m map[string]any) {
			m["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)["pattern"] = map[string]any{"Regex": `\s+(?!\S)|x`}
		}), "", ErrUnsupported, "tokenizer.json: pre_tokenizer.pretokenizers[0].pattern.Regex"},
		{"behavior", mutate(t, bl, func(m map[string]any) {
			m["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)["behavior"] = "Sideways"
		}), "", ErrUnsupported, "tokenizer.json: pre_tokenizer.pretokenizers[0].behavior"},
		{"normalizer", mutate(t, sp, func(m map[string]any) { m["normalizer"] = map[string]any{"type": "Precompiled"} }), "", ErrUnsupported, "tokenizer.json: normalizer.type"},
		{"decoder", mutate(t, sp, func(m map[string]any) {
			m["decoder"].(map[string]any)["decoders"].([]any)[3].(map[string]any)["content"] = "ab"
		}), "", ErrFormat, "tokenizer.json: decoder.decoders[3].content"},
		{"template id", mutate(t, sp, func(m map[string]any) {
			m["post_processor"].(map[string]any)["special_tokens"].(map[string]any)["<s>"].(map[string]any)["ids"] = []int{9999}
		}), "", ErrFormat, "tokenizer.json: post_processor: special token id 9999"},
		{"metaspace", mutate(t, spFixture(t, true), func(m map[string]any) { m["pre_tokenizer"].(map[string]any)["prepend_scheme"] = "sometimes" }), "", ErrFormat, "tokenizer.json: pre_tokenizer.prepend_scheme"},
		{"config json", bl, "{", ErrFormat, "tokenizer_config.json: "},
		{"config bos", bl, `{"bos_token": "<nope>"}`, ErrFormat, "tokenizer_config.json: bos_token"},
		{"config eos type", bl, `{"eos_token": 5}`, ErrFormat, "tokenizer_config.json: eos_token"},
		{"config template", bl, `{"chat_template": 5}`, ErrFormat, "tokenizer_config.json: chat_template"},
	}
	for _, c := range cases {
		_, err := FromJSON(c.data, []byte(c.cfg))
		if err == nil || !errors.Is(err, c.base) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %v containing %q", c.name, err, c.base, c.want)
		}
	}
}

func TestLoadBounds(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	f, err := os.Create(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(MaxFileSize + 1); err != nil { // sparse: no real disk use
		t.Fatal(err)
	}
	f.Close()
	if _, err := Load(dir); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "tokenizer.json") {
		t.Errorf("oversized: %v", err)
	}
}

// TestShippedModels loads the tokenizers shipped under models/ and checks the chat
// template renders and round-trips.
func TestShippedModels(t *testing.T) {
	dirs, _ := filepath.Glob("../../models/*/tokenizer.json")
	if len(dirs) == 0 {
		t.Skip("no shipped models")
	}
	for _, p := range dirs {
		dir := filepath.Dir(p)
		tk, err := Load(dir)
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		if !tk.HasChatTemplate() {
			t.Errorf("%s: no chat template", dir)
			continue
		}
		s, err := tk.RenderChat([]Message{{"system", "Be brief."}, {"user", "func main() {"}}, true)
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		ids := tk.Encode(s, true)
		if got := tk.Decode(ids, false); !strings.HasSuffix(got, s) {
			t.Errorf("%s: decode(encode(chat)) = %q, want suffix %q", dir, got, s)
		}
		if bos, ok := tk.BOS(); !ok || ids[0] != bos {
			t.Errorf("%s: BOS %d %v, ids[0] %d", dir, bos, ok, ids[0])
		}
	}
}
