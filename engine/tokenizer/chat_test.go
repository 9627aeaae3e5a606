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
		"{{ m.format(1) }}",
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
