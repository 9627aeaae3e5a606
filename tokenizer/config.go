package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
)

type jsonConfig struct {
	BOSToken     json.RawMessage `json:"bos_token"`
	EOSToken     json.RawMessage `json:"eos_token"`
	AddBOS       *bool           `json:"add_bos_token"`
	AddEOS       *bool           `json:"add_eos_token"`
	Cleanup      *bool           `json:"clean_up_tokenization_spaces"`
	ChatTemplate json.RawMessage `json:"chat_template"`
}

func cfgErr(field, format string, args ...any) error {
	return fmt.Errorf("%s: %s: %s: %w", fileCfg, field, fmt.Sprintf(format, args...), ErrFormat)
}

// tokenString decodes a token given as a string, an AddedToken-like object with "content",
// or null ("" result).
func tokenString(r json.RawMessage, field string) (string, error) {
	if isNull(r) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(r, &s); err == nil {
		return s, nil
	}
	var o struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(r, &o); err != nil || o.Content == nil {
		return "", cfgErr(field, "want a string or an object with \"content\"")
	}
	return *o.Content, nil
}

func (t *Tokenizer) applyConfig(data []byte) error {
	var c jsonConfig
	if len(data) > 0 {
		if err := json.Unmarshal(data, &c); err != nil {
			return fmt.Errorf("%s: %v: %w", fileCfg, err, ErrFormat)
		}
	}
	var err error
	if t.bosToken, err = tokenString(c.BOSToken, "bos_token"); err != nil {
		return err
	}
	if t.eosToken, err = tokenString(c.EOSToken, "eos_token"); err != nil {
		return err
	}
	if t.bosToken != "" {
		id, ok := t.TokenID(t.bosToken)
		if !ok {
			return cfgErr("bos_token", "%q is not in the vocabulary", t.bosToken)
		}
		t.bos, t.hasBOS = id, true
	} else if tp := firstTemplate(t.post); tp != nil && len(tp.single) > 0 && tp.single[0].special != "" {
		// No config: the template's leading special token is the BOS.
		if ids := tp.specials[tp.single[0].special]; len(ids) == 1 {
			t.bos, t.hasBOS = ids[0], true
			t.bosToken = t.Token(ids[0])
		}
	}
	if t.eosToken != "" {
		id, ok := t.TokenID(t.eosToken)
		if !ok {
			return cfgErr("eos_token", "%q is not in the vocabulary", t.eosToken)
		}
		t.eos = []int32{id}
	}
	t.tokenVars = map[string]string{}
	if len(data) > 0 {
		var all map[string]json.RawMessage
		if json.Unmarshal(data, &all) == nil {
			for k, v := range all {
				if strings.HasSuffix(k, "_token") {
					if s, err := tokenString(v, k); err == nil && s != "" {
						t.tokenVars[k] = s
					}
				}
			}
		}
	}
	t.addBOS, t.addEOS = c.AddBOS, c.AddEOS
	if c.Cleanup != nil {
		t.cleanup = *c.Cleanup
	}
	if !isNull(c.ChatTemplate) {
		var s string
		if err := json.Unmarshal(c.ChatTemplate, &s); err == nil {
			t.tmpl = s
		} else {
			var list []struct {
				Name     string `json:"name"`
				Template string `json:"template"`
			}
			if err := json.Unmarshal(c.ChatTemplate, &list); err != nil {
				return cfgErr("chat_template", "want a string or a list of {name, template}")
			}
			for _, e := range list {
				if e.Name == "default" {
					t.tmpl = e.Template
				}
			}
			if t.tmpl == "" && len(list) > 0 {
				return cfgErr("chat_template", "no template named \"default\"")
			}
		}
	}
	return nil
}

// cleanUpTokenization is transformers' clean_up_tokenization (applied when
// clean_up_tokenization_spaces is true).
func cleanUpTokenization(s string) string {
	for _, p := range [][2]string{{" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"},
		{" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}} {
		s = strings.ReplaceAll(s, p[0], p[1])
	}
	return s
}
