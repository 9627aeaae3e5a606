package tokenizer

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
)

type chatCase struct {
	Family              string    `json:"family"`
	Template            string    `json:"template"`
	BOS                 string    `json:"bos_token"`
	EOS                 string    `json:"eos_token"`
	Messages            []Message `json:"messages"`
	AddGenerationPrompt bool      `json:"add_generation_prompt"`
	Rendered            *string   `json:"rendered"`
	Error               string    `json:"error"`
}

func (m *Message) UnmarshalJSON(b []byte) error {
	var v struct{ Role, Content string }
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	m.Role, m.Content = v.Role, v.Content
	return nil
}

func readChatCases(t *testing.T, path string) []chatCase {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			t.Skipf("%s not present", path)
		}
		t.Fatal(err)
	}
	defer f.Close()
	var out []chatCase
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var c chatCase
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

func checkChat(t *testing.T, cases []chatCase) {
	fams := map[string]int{}
	for i, c := range cases {
		got, err := RenderTemplate(c.Template, c.Messages, c.AddGenerationPrompt, c.BOS, c.EOS)
		switch {
		case c.Rendered == nil:
			if !errors.Is(err, ErrTemplate) || !strings.Contains(err.Error(), c.Error) {
				t.Errorf("case %d (%s): want error %q, got %q, %v", i, c.Family, c.Error, got, err)
			}
		case err != nil:
			t.Errorf("case %d (%s): %v", i, c.Family, err)
		case got != *c.Rendered:
			t.Errorf("case %d (%s) agp=%v:\n got %q\nwant %q", i, c.Family, c.AddGenerationPrompt, got, *c.Rendered)
		default:
			fams[c.Family]++
		}
	}
	t.Logf("matched per family: %v", fams)
}

// TestChatLocal compares with Python jinja2 renderings (testdata/gen_chat.py).
func TestChatLocal(t *testing.T) { checkChat(t, readChatCases(t, "testdata/chat_local.jsonl")) }

// TestChatGolden compares with transformers' apply_chat_template (lead-produced goldens).
func TestChatGolden(t *testing.T) { checkChat(t, readChatCases(t, "testdata/chat/golden.jsonl")) }

func TestChatUnsupported(t *testing.T) {
	for _, src := range []string{
		"{% macro f() %}x{% endmacro %}",
		"{% include 'x' %}",
		"{{ x | wordwrap }}",
		"{{ 'a %s' % 1 }}",
		"{% for x in y recursive %}{% endfor %}",
		"{{ x is callable }}",
		"{{ 'x'.format(1) }}",
	} {
		_, err := RenderTemplate(src, []Message{{"user", "hi"}}, false, "", "")
		if !errors.Is(err, ErrUnsupportedTemplate) {
			t.Errorf("%q: want ErrUnsupportedTemplate, got %v", src, err)
		}
	}
	for _, src := range []string{"{% if x %}", "{{ x ", "{% for %}", "{% endfor %}"} {
		if _, err := RenderTemplate(src, nil, false, "", ""); err == nil {
			t.Errorf("%q: want an error", src)
		}
	}
}

// TestRenderChatGoldenSpecgate renders through Tokenizer.RenderChat (config-provided
// template and special tokens) for the golden cases of our tokenizer's template.
func TestRenderChatGoldenSpecgate(t *testing.T) {
	tk, err := Load("testdata/specgate")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for i, c := range readChatCases(t, "testdata/chat/golden.jsonl") {
		if c.Template != tk.ChatTemplate() || c.Rendered == nil || c.BOS != tk.bosToken || c.EOS != tk.eosToken {
			continue
		}
		got, err := tk.RenderChat(c.Messages, c.AddGenerationPrompt)
		if err != nil || got != *c.Rendered {
			t.Errorf("case %d: got %q, %v; want %q", i, got, err, *c.Rendered)
		}
		n++
	}
	if n == 0 {
		t.Fatal("no golden case uses the specgate template")
	}
	t.Logf("%d cases", n)
}

func TestChatBounds(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: runs a template to its step limit")
	}
	for _, src := range []string{
		"{% for a in range(1000000) %}{% for b in range(1000000) %}{% endfor %}{% endfor %}",
		"{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
		"{{ 'x' * 100000000 }}",
		"{% for i in range(100000000) %}{% endfor %}",
	} {
		if _, err := RenderTemplate(src, nil, false, "", ""); !errors.Is(err, ErrTemplate) {
			t.Errorf("%q: want a bounded ErrTemplate, got %v", src, err)
		}
	}
}

// TestJinjaSemantics: expected strings were produced by Python jinja2 3.1.6 with
// transformers' environment (trim_blocks, lstrip_blocks, loopcontrols).
func TestJinjaSemantics(t *testing.T) {
	msgs := []Message{{"user", "a"}, {"user", "b"}}
	cases := []struct{ src, want string }{
		{"{% set x = 0 %}{% for i in range(3) %}{{ x }}{% set x = i + 10 %}{{ x }},{% endfor %}{{ x }}", "010,011,012,0"},
		{"{% for i in range(2) %}{% for j in range(2) %}{{ loop.index }}{{ i }}{% endfor %}{{ loop.index }}|{% endfor %}", "10201|11212|"},
		{"{% for i in [] %}x{% else %}empty{% endfor %}", "empty"},
		{"{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}", "02"},
		{"  {% if true %}\n    yes\n  {% endif %}\nend\n", "    yes\nend"},
		{"{{ '%s' | length }} {{ [1,2,3][1:] }} {{ 'Hello'[1:3] }} {{ none }} {{ 1.5 }} {{ 10/2 }} {{ [1,'a',none] }} {{ {'a':1} }}", "2 [2, 3] el None 1.5 5.0 [1, 'a', None] {'a': 1}"},
		{"{%- for m in messages -%}\n  {{- m.content -}}\n{%- endfor -%}", "ab"},
		{"a {# comment #} b\n  {# c2 #}\nc", "a  b\nc"},
		{"{{ \"it's\" }} {{ 'a\\tb' | tojson }} {{ ['x', 1.0, 2e-7] | tojson }}", "it's \"a\\tb\" [\"x\", 1.0, 2e-07]"},
	}
	for _, c := range cases {
		got, err := RenderTemplate(c.src, msgs, false, "", "")
		if err != nil || got != c.want {
			t.Errorf("%q: got %q, %v; want %q", c.src, got, err, c.want)
		}
	}
	if _, err := RenderTemplate("{{ x.y }}", msgs, false, "", ""); !errors.Is(err, ErrTemplate) {
		t.Errorf("attribute of undefined: want ErrTemplate (jinja2: 'x' is undefined), got %v", err)
	}
}
