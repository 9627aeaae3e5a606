package tokenizer

import (
	"fmt"
	"strings"
)

// ParseChatTemplate checks that src is within the supported Jinja2 subset (errors wrap
// ErrUnsupportedTemplate or ErrTemplate).
func ParseChatTemplate(src string) error {
	_, err := parseTemplate(src)
	return err
}

// RenderTemplate renders a chat template source as transformers' apply_chat_template does
// (trim_blocks, lstrip_blocks, messages, add_generation_prompt, bos_token, eos_token,
// tools=None, documents=None, raise_exception, namespace, strftime_now).
func RenderTemplate(src string, msgs []Message, addGenerationPrompt bool, bosToken, eosToken string) (string, error) {
	nodes, err := parseTemplate(src)
	if err != nil {
		return "", err
	}
	list := make([]any, len(msgs))
	for i, m := range msgs {
		d := newDict()
		d.set("role", m.Role)
		d.set("content", m.Content)
		list[i] = d
	}
	vars := globals()
	vars["messages"] = list
	vars["add_generation_prompt"] = addGenerationPrompt
	vars["bos_token"] = bosToken
	vars["eos_token"] = eosToken
	vars["tools"] = nil
	vars["documents"] = nil
	var out strings.Builder
	env := &jenv{scopes: []map[string]any{vars}, out: &out}
	c, err := env.exec(nodes)
	if err != nil {
		return "", err
	}
	if c != ctrlNone {
		return "", fmt.Errorf("%s: chat_template: break/continue outside a loop: %w", fileCfg, ErrTemplate)
	}
	return out.String(), nil
}

// RenderChat renders the tokenizer's chat template (tokenizer_config.json chat_template or
// chat_template.jinja) with msgs. An unsupported construct gives an error wrapping
// ErrUnsupportedTemplate naming it; raise_exception and runtime failures wrap ErrTemplate.
func (t *Tokenizer) RenderChat(msgs []Message, addGenerationPrompt bool) (string, error) {
	if t.tmpl == "" {
		return "", fmt.Errorf("%s: chat_template: %w", fileCfg, ErrNoChatTemplate)
	}
	return RenderTemplate(t.tmpl, msgs, addGenerationPrompt, t.bosToken, t.eosToken)
}
