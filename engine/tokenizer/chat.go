package tokenizer

import "fmt"

// RenderChat renders the chat template with messages, bos_token, eos_token and
// add_generation_prompt.
func (t *Tokenizer) RenderChat(msgs []Message, addGenerationPrompt bool) (string, error) {
	if t.tmpl == "" {
		return "", fmt.Errorf("%s: chat_template: %w", fileCfg, ErrNoChatTemplate)
	}
	return "", fmt.Errorf("%s: chat_template: interpreter pending: %w", fileCfg, ErrUnsupportedTemplate)
}
