package gateway

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/specgate/specgate/cache"
	"github.com/specgate/specgate/tokenizer"
)

// The one normalisation of a chat request's messages. Every consumer reads
// its view from normalizeChat's result, so they cannot drift apart:
//
//   - the local engine: tokenizer messages for the chat template
//     (localMessages; chatMessages adds the local model's restrictions);
//   - the cache key, for local models and upstreams alike (cacheMessages:
//     system text into the namespace, the rest as key messages);
//   - the upstream: the body is forwarded as the client sent it (only an
//     aliased "model" is rewritten, withModel), so the upstream sees the
//     same messages the key was computed from.
//
// Rules:
//   - role "developer" is "system" (OpenAI's newer name for it); other
//     roles are kept as sent;
//   - content: a string as is; an array of parts: the text of its "text"
//     parts joined by "\n"; null or absent: "";
//   - whatever else makes a message what it is (the parts other than text,
//     such as images, tool_calls, name, tool_call_id) is kept as compact
//     JSON in extra, which the cache key includes: two requests that differ
//     only in an image never share an entry. Local models reject such
//     messages.

// chatMsg is one normalised message.
type chatMsg struct {
	role  string
	text  string
	extra string // compact JSON of non-text content; "" for plain text messages
}

// normalizeChat normalises messages. It never fails: validation is the
// consumer's (local models reject more than upstreams do).
func normalizeChat(in []ChatMessage) []chatMsg {
	out := make([]chatMsg, len(in))
	for i, m := range in {
		n := chatMsg{role: m.Role, text: m.Content.Text}
		if n.role == "developer" {
			n.role = "system"
		}
		var extra []byte
		if m.Content.Parts != nil {
			var b strings.Builder
			var other []byte // the parts other than text, as a JSON array
			k := 0
			for _, p := range m.Content.Parts {
				if p.Type != "text" || p.Text == nil {
					if other == nil {
						other = append(other, '[')
					} else {
						other = append(other, ',')
					}
					if p.raw != nil {
						other = append(other, p.raw...)
					} else {
						pb, _ := json.Marshal(p) // a text part without text: {"type":"text","text":null}
						other = append(other, pb...)
					}
					continue
				}
				if k > 0 {
					b.WriteByte('\n')
				}
				b.WriteString(*p.Text)
				k++
			}
			n.text = b.String()
			if other != nil {
				extra = appendField(extra, "content", append(other, ']'))
			}
		}
		if present(m.ToolCalls) {
			extra = appendField(extra, "tool_calls", m.ToolCalls)
		}
		if m.Name != nil {
			v, _ := json.Marshal(*m.Name)
			extra = appendField(extra, "name", v)
		}
		if m.ToolCallID != nil {
			v, _ := json.Marshal(*m.ToolCallID)
			extra = appendField(extra, "tool_call_id", v)
		}
		if extra != nil {
			n.extra = string(append(extra, '}'))
		}
		out[i] = n
	}
	return out
}

// appendField appends "key":compact(v) to a JSON object under construction
// (dst nil: starts it with '{').
func appendField(dst []byte, key string, v []byte) []byte {
	if dst == nil {
		dst = append(dst, '{')
	} else {
		dst = append(dst, ',')
	}
	dst = append(dst, '"')
	dst = append(dst, key...)
	dst = append(dst, '"', ':')
	var b bytes.Buffer
	if json.Compact(&b, v) != nil {
		return append(dst, "null"...)
	}
	return append(dst, b.Bytes()...)
}

// localMessages is the local engine's view: role and text.
func localMessages(n []chatMsg) []tokenizer.Message {
	out := make([]tokenizer.Message, len(n))
	for i, m := range n {
		out[i] = tokenizer.Message{Role: m.role, Content: m.text}
	}
	return out
}

// cacheMessages is the cache key's view: the system messages' text joined
// by "\n" (hashed into the namespace), the others in order, each with its
// extra JSON on a line of its own after the text.
func cacheMessages(n []chatMsg) (system string, msgs []cache.Message) {
	var sys []string
	for _, m := range n {
		text := m.text
		if m.extra != "" {
			text += "\n" + m.extra
		}
		if m.role == "system" {
			sys = append(sys, text)
			continue
		}
		msgs = append(msgs, cache.Message{Role: m.role, Content: text})
	}
	return strings.Join(sys, "\n"), msgs
}
