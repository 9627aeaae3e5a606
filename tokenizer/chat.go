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
	return render(nodes, msgs, addGenerationPrompt, map[string]string{"bos_token": bosToken, "eos_token": eosToken})
}

func render(nodes []jnode, msgs []Message, addGenerationPrompt bool, tokenVars map[string]string) (string, error) {
	list := make([]any, len(msgs))
	for i, m := range msgs {
		d := newDict()
		d.set("role", m.Role)
		d.set("content", m.Content)
		list[i] = d
	}
	vars := globals()
	vars["bos_token"] = ""
	vars["eos_token"] = ""
	for k, v := range tokenVars {
		vars[k] = v
	}
	vars["messages"] = list
	vars["add_generation_prompt"] = addGenerationPrompt
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
// chat_template.jinja) with msgs, bos_token/eos_token and the config's other *_token
// strings. An unsupported construct gives an error wrapping ErrUnsupportedTemplate naming
// it; raise_exception and runtime failures wrap ErrTemplate. The template is parsed once.
func (t *Tokenizer) RenderChat(msgs []Message, addGenerationPrompt bool) (string, error) {
	if t.tmpl == "" {
		return "", fmt.Errorf("%s: chat_template: %w", fileCfg, ErrNoChatTemplate)
	}
	t.tmplOnce.Do(func() { t.tmplAST, t.tmplErr = parseTemplate(t.tmpl) })
	if t.tmplErr != nil {
		return "", t.tmplErr
	}
	vars := map[string]string{"bos_token": t.bosToken, "eos_token": t.eosToken}
	for k, v := range t.tokenVars {
		if k != "bos_token" && k != "eos_token" {
			vars[k] = v
		}
	}
	return render(t.tmplAST, msgs, addGenerationPrompt, vars)
}
