package gateway

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
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
//     JSON in extra. The key messages carry it, and the extras of the
//     earlier turns (with tool results' text) are hashed into the namespace
//     (contextHash), because under the default key_mode last-user the entry
//     key is the last user message only: two requests that differ only in
//     an image, or in an earlier tool call or tool result, never share an
//     entry. Local models reject such messages.

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

// contextParam is the namespace parameter that carries contextHash. The
// name "messages" cannot collide with a request field: the proxy keeps the
// messages out of its parameters (upstreamCacheRequest), and the local
// parameters are named by commonCacheParams.
const contextParam = "messages"

// contextHash hashes what the cache key may not see of the earlier turns:
// with the cache's default key_mode last-user the entry key is the last
// user message only (cache.KeyText), so two conversations that differ only
// in an earlier assistant's tool_calls, a tool result or a name would share
// an entry. Every non-system message but the last user one contributes its
// position, role and extra JSON, and a tool (or legacy function) message its
// text too; earlier plain text does not (last-user mode's choice: a
// rephrased history still hits). "" when no such message has anything to
// add, so plain conversations keep their namespace. Under key_mode
// conversation every message is in the key already and the hash only
// repeats it.
func contextHash(n []chatMsg) string {
	last := -1
	for i := len(n) - 1; i >= 0; i-- {
		if n[i].role == "user" {
			last = i
			break
		}
	}
	var h hash.Hash
	for i, m := range n {
		if i == last || m.role == "system" {
			continue
		}
		tool := m.role == "tool" || m.role == "function"
		if m.extra == "" && !tool {
			continue
		}
		if h == nil {
			h = sha256.New()
		}
		fmt.Fprintf(h, "%d\x00%s\x00%s\x00", i, m.role, m.extra)
		if tool {
			h.Write([]byte(m.text))
		}
		h.Write([]byte{0})
	}
	if h == nil {
		return ""
	}
	return "ctx:" + hex.EncodeToString(h.Sum(nil)[:16])
}

// setCacheMessages fills the cache request's system text, key messages and
// (when the earlier turns carry tool calls, tool results or names) their
// hash in the namespace parameters.
func setCacheMessages(cr *cache.Request, n []chatMsg) {
	cr.System, cr.Messages = cacheMessages(n)
	if c := contextHash(n); c != "" {
		if cr.Params == nil {
			cr.Params = map[string]string{}
		}
		cr.Params[contextParam] = c
	}
}
