package gateway

import (
	"bytes"
	"encoding/json"
	"strconv"
	"sync"

	"github.com/gofiber/fiber/v2"

	"github.com/specgate/specgate/cache"
)

// A cache hit used to decode the stored response, give it a fresh id and
// created time (and cached_tokens), and encode it again, per hit; a stream
// replay did that and then encoded every chunk. cachedView does it once, when
// the entry enters the cache's hot tier: the rewritten body (and, at the
// first streamed hit, the whole SSE replay) is rendered with placeholder
// values for the id and the created time and cut at them. A hit then writes
// the pieces with the request's id and time in between: no JSON work, no
// re-encoding. The bytes are exactly what rewriteCached / replaySSE produce
// (TestCachedViewMatchesRewrite).

// Placeholder values rendered where a hit's id and created time go. A stored
// response that contains either (as text) gets no view and takes the slow
// path, so a placeholder can never be confused with content.
const (
	holeID      = "specgate-hole-id-5f0c3a9e"
	holeCreated = int64(-7393917739)
)

var (
	holeIDJSON      = []byte(`"` + holeID + `"`)
	holeCreatedJSON = []byte(strconv.FormatInt(holeCreated, 10))
)

// tmpl is a rendered response cut at its holes: parts[0] hole[0] parts[1] …
type tmpl struct {
	parts [][]byte
	holes []bool // true: id, false: created
}

// cut splits b at every placeholder. ok is false when b has none (nothing
// to fill: not our shape).
func cut(b []byte) (t tmpl, ok bool) {
	for {
		i := bytes.Index(b, holeIDJSON)
		j := bytes.Index(b, holeCreatedJSON)
		if i < 0 && j < 0 {
			t.parts = append(t.parts, b)
			return t, len(t.holes) > 0
		}
		if i >= 0 && (j < 0 || i < j) {
			t.parts = append(t.parts, b[:i])
			t.holes = append(t.holes, true)
			b = b[i+len(holeIDJSON):]
		} else {
			t.parts = append(t.parts, b[:j])
			t.holes = append(t.holes, false)
			b = b[j+len(holeCreatedJSON):]
		}
	}
}

func (t *tmpl) size() int {
	n := 0
	for _, p := range t.parts {
		n += len(p)
	}
	return n
}

// write appends the filled template to the response body.
func (t *tmpl) write(resp *fiber.Ctx, id string, created int64) {
	r := resp.Response()
	var num [20]byte
	idq := appendJSONString(make([]byte, 0, len(id)+2), id)
	for i, p := range t.parts {
		r.AppendBody(p)
		if i < len(t.holes) {
			if t.holes[i] {
				r.AppendBody(idq)
			} else {
				r.AppendBody(strconv.AppendInt(num[:0], created, 10))
			}
		}
	}
}

// cachedView is a stored response ready to write on a hit.
type cachedView struct {
	body     tmpl   // the rewritten JSON body
	usage    *Usage // usage as a hit reports it (cached_tokens = prompt tokens); nil if the body has none
	storedID string // the stored response's own id (upstream hits keep it)
	// object is the stored object type; our own chat and text completions
	// also get an SSE replay, rendered at the first streamed hit.
	object string
	own    bool

	sseOnce sync.Once
	sse     [2]tmpl // [0] without, [1] with the usage chunk (stream_options.include_usage)
	sseOK   bool
}

// renderCached is the gateway's cache.Renderer.
func renderCached(stored []byte) (any, int64) {
	if bytes.Contains(stored, []byte(holeID)) || bytes.Contains(stored, holeCreatedJSON[1:]) {
		return nil, 0
	}
	body, usage := rewriteCached(stored, holeID, holeCreated, true)
	t, ok := cut(body)
	if !ok {
		return nil, 0
	}
	var probe struct {
		ID                string `json:"id"`
		Object            string `json:"object"`
		SystemFingerprint string `json:"system_fingerprint"`
	}
	_ = json.Unmarshal(stored, &probe)
	v := &cachedView{body: t, usage: usage, storedID: probe.ID, object: probe.Object,
		own: probe.SystemFingerprint == systemFingerprint && (probe.Object == "chat.completion" || probe.Object == "text_completion")}
	size := int64(t.size()) + 256
	if v.own {
		size += 3 * int64(t.size()) // the SSE replay, rendered later
	}
	return v, size
}

// sseFor returns the SSE replay template (with or without the usage chunk),
// rendering both on first use; ok is false when the view has none.
func (v *cachedView) sseFor(includeUsage bool) (*tmpl, bool) {
	if !v.own {
		return nil, false
	}
	v.sseOnce.Do(func() {
		// Render the body with placeholders, then the chunks from it.
		body := fillString(&v.body, holeID, holeCreated)
		for k, inc := range []bool{false, true} {
			chunks, err := sseChunks(body, v.usage, holeID, holeCreated, inc, v.object == "chat.completion")
			if err != nil {
				return
			}
			var out []byte
			for _, ch := range chunks {
				cb, err := json.Marshal(ch)
				if err != nil {
					return
				}
				out = append(append(append(out, sseData...), cb...), sseEnd...)
			}
			out = append(out, sseDone...)
			t, ok := cut(out)
			if !ok {
				return
			}
			v.sse[k] = t
		}
		v.sseOK = true
	})
	if !v.sseOK {
		return nil, false
	}
	if includeUsage {
		return &v.sse[1], true
	}
	return &v.sse[0], true
}

// fillString returns the template filled with id and created.
func fillString(t *tmpl, id string, created int64) []byte {
	var out []byte
	for i, p := range t.parts {
		out = append(out, p...)
		if i < len(t.holes) {
			if t.holes[i] {
				out = appendJSONString(out, id)
			} else {
				out = strconv.AppendInt(out, created, 10)
			}
		}
	}
	return out
}

// viewOf returns the pre-rendered view of a hit, if the cache made one.
func viewOf(l cache.Lookup) *cachedView {
	v, _ := l.View.(*cachedView)
	return v
}

// appendJSONString appends s as a JSON string.
func appendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s)
			return append(dst, b...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}
