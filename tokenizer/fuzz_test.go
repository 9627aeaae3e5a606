package tokenizer

import (
	"os"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzFromJSON: arbitrary tokenizer.json / tokenizer_config.json bytes must never panic or
// allocate beyond the bounds; a tokenizer that loads must encode, decode and stream-decode
// without panicking and emit only ids below VocabSize.
func FuzzFromJSON(f *testing.F) {
	f.Add(byteLevelFixture(f, false), []byte(`{"bos_token":"<|begin|>","eos_token":"<|end|>","add_bos_token":true}`))
	f.Add(byteLevelFixture(f, true), []byte(`{"chat_template":"{% for m in messages %}{{ m.content }}{% endfor %}"}`))
	f.Add(spFixture(f, false), []byte(`{"add_bos_token":false,"add_eos_token":true,"eos_token":"</s>"}`))
	f.Add(spFixture(f, true), []byte(nil))
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]},"normalizer":{"type":"NFKC"},"pre_tokenizer":{"type":"Digits","individual_digits":true}}`), []byte(`{}`))
	f.Add([]byte(`{"model":{"vocab":{"a":0},"merges":[]},"added_tokens":[{"id":1,"content":"<x>","lstrip":true,"rstrip":true,"single_word":true}]}`), []byte(nil))
	f.Fuzz(func(t *testing.T, data, cfg []byte) {
		tk, err := FromJSON(data, cfg)
		if err != nil {
			return
		}
		for _, s := range []string{"Hello world", " <|end|>x<s>  1234\n\n\t你好😀", "aaa é\xff", ""} {
			for _, special := range []bool{false, true} {
				ids := tk.Encode(s, special)
				for _, id := range ids {
					if id < 0 || int(id) >= tk.VocabSize() {
						t.Fatalf("Encode(%q) produced id %d outside [0,%d)", s, id, tk.VocabSize())
					}
				}
				_ = tk.Decode(ids, false)
				d := tk.NewDecoder(true)
				for _, id := range ids {
					if out := d.Add(id); !utf8.ValidString(out) {
						t.Fatalf("stream chunk %q invalid UTF-8", out)
					}
				}
				_ = d.Flush()
			}
		}
		if tk.HasChatTemplate() {
			_, _ = tk.RenderChat([]Message{{"user", "hi"}}, true)
		}
	})
}

// FuzzEncodeRoundTrip: for the byte-level golden tokenizer, decode(encode(s)) == s for any
// valid UTF-8 s, and streaming decode concatenates to the same string.
func FuzzEncodeRoundTrip(f *testing.F) {
	tk, err := Load("testdata/specgate")
	if err != nil {
		f.Skip(err)
	}
	for _, s := range []string{"Hello world", "  \n\n\t x := 1_000_000 // 'tis\r\n", "你好，世界 😀👨‍👩‍👧", "<|im_start|>user\nhi<|im_end|>", "ſ'S'LL"} {
		f.Add(s)
	}
	if src, err := os.ReadFile("bpe.go"); err == nil {
		f.Add(string(src[:2000]))
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		ids := tk.Encode(s, false)
		if got := tk.Decode(ids, false); got != s {
			t.Fatalf("round trip: %q -> %v -> %q", s, ids, got)
		}
		d := tk.NewDecoder(false)
		var b strings.Builder
		for _, id := range ids {
			out := d.Add(id)
			if !utf8.ValidString(out) {
				t.Fatalf("invalid chunk %q", out)
			}
			b.WriteString(out)
		}
		b.WriteString(d.Flush())
		if b.String() != s {
			t.Fatalf("stream %q != %q", b.String(), s)
		}
	})
}

// FuzzRenderTemplate: arbitrary template sources must not panic and stay bounded.
func FuzzRenderTemplate(f *testing.F) {
	for _, s := range []string{
		"{% for m in messages %}{{ m.role ~ ': ' ~ m.content | trim }}{% if not loop.last %}\n{% endif %}{% endfor %}",
		"{%- set ns = namespace(x=1) -%}{% set ns.x = ns.x + 1 %}{{ ns.x }}{{ messages[1:] | length }}",
		"{{ raise_exception('no') }}", "{{ range(10) | join(',') }}{{ 'abc'[::-1] }}",
		"{% if a %}x{% elif b %}y{% else %}z{% endif %}{{ {'a': [1, 2.5]} | tojson(indent=2) }}",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		out, err := RenderTemplate(src, []Message{{"system", "s"}, {"user", "u"}}, true, "<s>", "</s>")
		if err == nil && len(out) > maxRenderOutput*2 {
			t.Fatalf("output %d bytes", len(out))
		}
	})
}
