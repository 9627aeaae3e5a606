package tokenizer

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"golang.org/x/text/unicode/norm"
)

// gpt2Bytes is an independent copy of GPT-2's bytes_to_unicode for building fixtures.
func gpt2Bytes() []string {
	var bs []int
	for b := '!'; b <= '~'; b++ {
		bs = append(bs, int(b))
	}
	for b := 0xA1; b <= 0xAC; b++ {
		bs = append(bs, b)
	}
	for b := 0xAE; b <= 0xFF; b++ {
		bs = append(bs, b)
	}
	cs := make([]int, len(bs))
	copy(cs, bs)
	n := 0
	for b := 0; b < 256; b++ {
		if !slices.Contains(bs, b) {
			bs = append(bs, b)
			cs = append(cs, 256+n)
			n++
		}
	}
	out := make([]string, 256)
	for i, b := range bs {
		out[b] = string(rune(cs[i]))
	}
	return out
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// byteLevelFixture: ids 0..255 are the byte-level runes of bytes 0..255, then merges.
func byteLevelFixture(t testing.TB, llama3 bool) []byte {
	bl := gpt2Bytes()
	vocab := map[string]int{}
	for b, s := range bl {
		vocab[s] = b
	}
	merges := [][2]string{{"Ġ", "w"}, {"o", "r"}, {"Ġw", "or"}, {"l", "d"}, {"Ġwor", "ld"},
		{"H", "e"}, {"l", "l"}, {"He", "ll"}, {"Hell", "o"}, {"a", "a"}}
	next := 256
	for _, m := range merges {
		vocab[m[0]+m[1]] = next // 256 Ġw, 257 or, 258 Ġwor, 259 ld, 260 Ġworld, 261 He, 262 ll, 263 Hell, 264 Hello, 265 aa
		next++
	}
	added := []map[string]any{
		{"id": 266, "content": "<|end|>", "special": true, "normalized": false, "lstrip": false, "rstrip": false, "single_word": false},
		{"id": 267, "content": "<|begin|>", "special": true, "normalized": false, "lstrip": false, "rstrip": false, "single_word": false},
		{"id": 268, "content": "<|user|>", "special": true, "normalized": false, "lstrip": false, "rstrip": true, "single_word": false},
	}
	var pre any = map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}
	if llama3 {
		pre = map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": patLlama3}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false},
		}}
	}
	return mustJSON(t, map[string]any{
		"version":       "1.0",
		"added_tokens":  added,
		"normalizer":    nil,
		"pre_tokenizer": pre,
		"post_processor": map[string]any{"type": "TemplateProcessing",
			"single":         []any{map[string]any{"SpecialToken": map[string]any{"id": "<|begin|>", "type_id": 0}}, map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}},
			"pair":           []any{},
			"special_tokens": map[string]any{"<|begin|>": map[string]any{"id": "<|begin|>", "ids": []int{267}, "tokens": []string{"<|begin|>"}}}},
		"decoder": map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
		"model":   map[string]any{"type": "BPE", "dropout": nil, "unk_token": nil, "fuse_unk": false, "byte_fallback": false, "vocab": vocab, "merges": merges},
	})
}

// spFixture: Llama-2 style. metaspace selects the Metaspace pre-tokenizer variant instead of
// the Prepend/Replace normalizer.
func spFixture(t testing.TB, metaspace bool) []byte {
	vocab := map[string]int{"<unk>": 0, "<s>": 1, "</s>": 2}
	for b := 0; b < 256; b++ {
		vocab[fmt.Sprintf("<0x%02X>", b)] = 3 + b
	}
	for i, s := range []string{"▁", "H", "e", "l", "o", "w", "r", "d"} {
		vocab[s] = 259 + i // 259 ▁ 260 H 261 e 262 l 263 o 264 w 265 r 266 d
	}
	merges := []string{"▁ H", "l l", "e ll", "▁H ell", "▁Hell o", "▁ w", "o r", "▁w or", "▁wor l", "▁worl d"}
	for i, m := range []string{"▁H", "ll", "ell", "▁Hell", "▁Hello", "▁w", "or", "▁wor", "▁worl", "▁world"} {
		vocab[m] = 267 + i // 267 ▁H 268 ll 269 ell 270 ▁Hell 271 ▁Hello 272 ▁w 273 or 274 ▁wor 275 ▁worl 276 ▁world
	}
	added := []map[string]any{
		{"id": 0, "content": "<unk>", "special": true, "normalized": false},
		{"id": 1, "content": "<s>", "special": true, "normalized": false},
		{"id": 2, "content": "</s>", "special": true, "normalized": false},
	}
	var norm, pre any
	var dec any = map[string]any{"type": "Sequence", "decoders": []any{
		map[string]any{"type": "Replace", "pattern": map[string]any{"String": "▁"}, "content": " "},
		map[string]any{"type": "ByteFallback"},
		map[string]any{"type": "Fuse"},
		map[string]any{"type": "Strip", "content": " ", "start": 1, "stop": 0},
	}}
	if metaspace {
		pre = map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": true}
		dec = map[string]any{"type": "Sequence", "decoders": []any{
			map[string]any{"type": "ByteFallback"},
			map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": true},
		}}
	} else {
		norm = map[string]any{"type": "Sequence", "normalizers": []any{
			map[string]any{"type": "Prepend", "prepend": "▁"},
			map[string]any{"type": "Replace", "pattern": map[string]any{"String": " "}, "content": "▁"},
		}}
	}
	return mustJSON(t, map[string]any{
		"added_tokens":  added,
		"normalizer":    norm,
		"pre_tokenizer": pre,
		"post_processor": map[string]any{"type": "TemplateProcessing",
			"single":         []any{map[string]any{"SpecialToken": map[string]any{"id": "<s>"}}, map[string]any{"Sequence": map[string]any{"id": "A"}}},
			"special_tokens": map[string]any{"<s>": map[string]any{"id": "<s>", "ids": []int{1}, "tokens": []string{"<s>"}}}},
		"decoder": dec,
		"model":   map[string]any{"type": "BPE", "unk_token": "<unk>", "fuse_unk": true, "byte_fallback": true, "vocab": vocab, "merges": merges},
	})
}

func TestByteLevelFixture(t *testing.T) {
	for _, llama3 := range []bool{false, true} {
		tk, err := FromJSON(byteLevelFixture(t, llama3), []byte(`{"bos_token":"<|begin|>","eos_token":"<|end|>"}`))
		if err != nil {
			t.Fatal(err)
		}
		cases := []struct {
			text    string
			special bool
			want    []int32
		}{
			{"Hello world", false, []int32{264, 260}},
			{"Hello world", true, []int32{267, 264, 260}},
			{"Hello world<|end|>", false, []int32{264, 260, 266}},
			{"<|user|>  Hello", false, []int32{268, 264}}, // rstrip eats the spaces
			{"aaa", false, []int32{265, 'a'}},             // equal ranks merge left first
			{"é", false, []int32{0xC3, 0xA9}},             // bytes, byte-level runes Ã ©
			{" \n", false, []int32{gpt2Idx(' '), gpt2Idx('\n')}},
			{"", true, []int32{267}},
		}
		for _, c := range cases {
			if got := tk.Encode(c.text, c.special); !slices.Equal(got, c.want) {
				t.Errorf("llama3=%v Encode(%q,%v) = %v, want %v", llama3, c.text, c.special, got, c.want)
			}
		}
		if got := tk.Decode([]int32{267, 264, 260, 266}, false); got != "<|begin|>Hello world<|end|>" {
			t.Errorf("Decode = %q", got)
		}
		if got := tk.Decode([]int32{267, 264, 260, 266}, true); got != "Hello world" {
			t.Errorf("Decode skip = %q", got)
		}
		if got := tk.Decode([]int32{0xC3}, false); got != "\uFFFD" {
			t.Errorf("Decode partial = %q", got)
		}
		d := tk.NewDecoder(false)
		if a, b := d.Add(0xC3), d.Add(0xA9); a != "" || b != "é" {
			t.Errorf("stream = %q %q", a, b)
		}
		if bos, ok := tk.BOS(); !ok || bos != 267 {
			t.Errorf("BOS = %d %v", bos, ok)
		}
		if eos := tk.EOS(); !slices.Equal(eos, []int32{266}) {
			t.Errorf("EOS = %v", eos)
		}
		if !tk.IsSpecial(266) || tk.IsSpecial(264) || tk.VocabSize() != 269 {
			t.Errorf("IsSpecial/VocabSize wrong: %d", tk.VocabSize())
		}
	}
}

func gpt2Idx(b byte) int32 { return int32(b) }

func TestSentencePieceFixture(t *testing.T) {
	for _, ms := range []bool{false, true} {
		tk, err := FromJSON(spFixture(t, ms), nil)
		if err != nil {
			t.Fatal(err)
		}
		cases := []struct {
			text string
			want []int32
		}{
			{"Hello world", []int32{271, 276}},
			{"Hi 😀", []int32{267, 3 + 'i', 259, 3 + 0xF0, 3 + 0x9F, 3 + 0x98, 3 + 0x80}},
		}
		for _, c := range cases {
			if got := tk.Encode(c.text, false); !slices.Equal(got, c.want) {
				t.Errorf("metaspace=%v Encode(%q) = %v, want %v", ms, c.text, got, c.want)
			}
		}
		want := []int32{271, 2, 276} // normalizer: each piece gets its own ▁
		if ms {
			want = []int32{271, 2, 264, 273, 262, 266} // prepend_scheme first: only at offset 0
		}
		if got := tk.Encode("Hello</s>world", false); !slices.Equal(got, want) {
			t.Errorf("metaspace=%v Encode(Hello</s>world) = %v, want %v", ms, got, want)
		}
		if got := tk.Encode("Hello", true); !slices.Equal(got, []int32{1, 271}) {
			t.Errorf("Encode special = %v", got)
		}
		if got := tk.Decode([]int32{267, 3 + 'i', 259, 3 + 0xF0, 3 + 0x9F, 3 + 0x98, 3 + 0x80}, false); got != "Hi 😀" {
			t.Errorf("metaspace=%v Decode = %q", ms, got)
		}
		if got := tk.Decode([]int32{1, 271, 276}, true); got != "Hello world" {
			t.Errorf("metaspace=%v Decode skip = %q", ms, got)
		}
		if got := tk.Decode([]int32{3 + 0xF0, 3 + 0x9F, 271}, false); got != "\uFFFD\uFFFD Hello" {
			t.Errorf("metaspace=%v Decode invalid bytes = %q", ms, got)
		}
		if bos, ok := tk.BOS(); !ok || bos != 1 {
			t.Errorf("BOS from template = %d %v", bos, ok)
		}
	}
}

func TestNormalizers(t *testing.T) {
	cases := []struct {
		n        normalizer
		in, want string
	}{
		{normLower{}, "HeLLo ΣΑΣ ΟΔΟΣ. İ", "hello σας οδος. i\u0307"},
		{normForm{norm.NFKC}, "ﬁ①Ａ", "fi1A"},
		{normSeq{normPrepend{"▁"}, replacer{lit: " ", content: "▁"}}, "a b", "▁a▁b"},
		{normPrepend{"▁"}, "", ""},
		{normStrip{true, true}, " \t x \n", "x"},
	}
	for _, c := range cases {
		if got := c.n.normalize(c.in); got != c.want {
			t.Errorf("%T(%q) = %q, want %q", c.n, c.in, got, c.want)
		}
	}
}

// TestAddedTokenFlags checks lstrip, single_word and normalized added tokens against
// hand-derived HF AddedVocabulary behaviour.
func TestAddedTokenFlags(t *testing.T) {
	bl := mutate(t, byteLevelFixture(t, true), func(m map[string]any) {
		m["added_tokens"] = append(m["added_tokens"].([]any),
			map[string]any{"id": 269, "content": "<x>", "lstrip": true, "normalized": false, "special": false},
			map[string]any{"id": 270, "content": "hi", "single_word": true, "normalized": false, "special": false})
	})
	tk, err := FromJSON(bl, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		text string
		want []int32
	}{
		{"a  <x>b", []int32{'a', 269, 'b'}},                // lstrip takes the spaces into the token
		{"hi this", []int32{270, ' ', 't', 'h', 'i', 's'}}, // "hi" inside "this" is not a single word
		{"(hi)", []int32{'(', 270, ')'}},
	} {
		if got := tk.Encode(c.text, false); !slices.Equal(got, c.want) {
			t.Errorf("Encode(%q) = %v, want %v", c.text, got, c.want)
		}
	}
	if tk.IsSpecial(269) || tk.Decode([]int32{270, 269}, true) != "hi<x>" {
		t.Errorf("non-special added tokens must survive skipSpecial: %q", tk.Decode([]int32{270, 269}, true))
	}

	sp := mutate(t, spFixture(t, false), func(m map[string]any) {
		m["added_tokens"] = append(m["added_tokens"].([]any),
			map[string]any{"id": 277, "content": "foo", "normalized": true, "special": false})
	})
	tk, err = FromJSON(sp, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Matched on the normalized text ("▁foo"), decoded through the normalized form.
	if got := tk.Encode("a foo", false); !slices.Equal(got, []int32{259, 3 + 'a', 277}) {
		t.Errorf("Encode(a foo) = %v", got)
	}
	if got := tk.Decode([]int32{259, 3 + 'a', 277}, false); got != "a foo" {
		t.Errorf("Decode = %q", got)
	}
}

// TestSequenceNullMembers: a null member of any Sequence component is
// skipped, as HF does, instead of becoming a nil stage that panics later.
func TestSequenceNullMembers(t *testing.T) {
	var m map[string]any
	if err := json.Unmarshal(byteLevelFixture(t, false), &m); err != nil {
		t.Fatal(err)
	}
	plain, err := FromJSON(byteLevelFixture(t, false), nil)
	if err != nil {
		t.Fatal(err)
	}
	m["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{nil, m["pre_tokenizer"]}}
	m["decoder"] = map[string]any{"type": "Sequence", "decoders": []any{m["decoder"], nil}}
	m["normalizer"] = map[string]any{"type": "Sequence", "normalizers": []any{nil}}
	m["post_processor"] = map[string]any{"type": "Sequence", "processors": []any{nil, m["post_processor"]}}
	data, _ := json.Marshal(m)
	tk, err := FromJSON(data, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"Hello world", " \n aaa é"} {
		for _, special := range []bool{false, true} {
			got, want := tk.Encode(s, special), plain.Encode(s, special)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("Encode(%q, %v) = %v, want %v", s, special, got, want)
			}
			if g, w := tk.Decode(got, false), plain.Decode(want, false); g != w {
				t.Errorf("Decode = %q, want %q", g, w)
			}
		}
	}
}
