package gateway

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"
)

// filled runs the view's template through a real fiber context, as a hit does.
func filled(t *testing.T, tp *tmpl, id string, created int64) []byte {
	t.Helper()
	app := fiber.New()
	fc := &fasthttp.RequestCtx{}
	c := app.AcquireCtx(fc)
	defer app.ReleaseCtx(c)
	tp.write(c, id, created)
	return append([]byte(nil), c.Response().Body()...)
}

// TestCachedViewMatchesRewrite: a pre-rendered hit writes exactly the bytes
// of the per-hit path it replaces (rewriteCached for JSON, sseChunks +
// sseWriter for streams), for our own shapes and an upstream's.
func TestCachedViewMatchesRewrite(t *testing.T) {
	content := "Line one.\nLine \"two\" <b> & ü"
	chat, _ := json.Marshal(ChatCompletion{ID: "chatcmpl-old", Object: "chat.completion", Created: 1, Model: "m", SystemFingerprint: systemFingerprint,
		Choices: []ChatChoice{{Index: 0, Message: AssistantMsg{Role: "assistant", Content: content}, FinishReason: "stop"}},
		Usage:   &Usage{PromptTokens: 7, CompletionTokens: 3, TotalTokens: 10, Speculative: &SpeculativeUsage{Steps: 2}}})
	fr := "length"
	ub, _ := json.Marshal(Usage{PromptTokens: 4, CompletionTokens: 2, TotalTokens: 6})
	text, _ := json.Marshal(Completion{ID: "cmpl-old", Object: "text_completion", Created: 1, Model: "m", SystemFingerprint: systemFingerprint,
		Choices: []CompletionChoice{{Text: content, Index: 0, FinishReason: &fr}}, Usage: ub})
	upstream := []byte(`{"id":"chatcmpl-up","object":"chat.completion","created":5,"model":"gpt","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4},"extra":{"k":[1,2]}}`)
	for _, tc := range []struct {
		name   string
		stored []byte
		chat   bool
		own    bool
	}{{"chat", chat, true, true}, {"text", text, false, true}, {"upstream", upstream, true, false}} {
		t.Run(tc.name, func(t *testing.T) {
			vi, size := renderCached(tc.stored)
			v, ok := vi.(*cachedView)
			if !ok || size <= 0 {
				t.Fatalf("no view (%T, %d)", vi, size)
			}
			for _, id := range []string{"chatcmpl-abc123", "id with \"quote\" ü"} {
				want, wantUsage := rewriteCached(tc.stored, id, 1700000123, true)
				if got := filled(t, &v.body, id, 1700000123); !bytes.Equal(got, want) {
					t.Errorf("JSON:\n got %s\nwant %s", got, want)
				}
				gu, _ := json.Marshal(v.usage)
				wu, _ := json.Marshal(wantUsage)
				if !bytes.Equal(gu, wu) {
					t.Errorf("usage %s, want %s", gu, wu)
				}
			}
			if tc.own && v.storedID == "" || !tc.own && v.storedID != "chatcmpl-up" {
				t.Errorf("stored id %q", v.storedID)
			}
			for _, inc := range []bool{false, true} {
				sse, ok := v.sseFor(inc)
				if ok != tc.own {
					t.Fatalf("SSE view: %v, want %v", ok, tc.own)
				}
				if !ok {
					continue
				}
				body, usage := rewriteCached(tc.stored, "chatcmpl-x", 42, true)
				chunks, err := sseChunks(body, usage, "chatcmpl-x", 42, inc, tc.chat)
				if err != nil {
					t.Fatal(err)
				}
				var want bytes.Buffer
				for _, ch := range chunks {
					b, _ := json.Marshal(ch)
					want.WriteString("data: ")
					want.Write(b)
					want.WriteString("\n\n")
				}
				want.WriteString("data: [DONE]\n\n")
				if got := filled(t, sse, "chatcmpl-x", 42); !bytes.Equal(got, want.Bytes()) {
					t.Errorf("SSE include_usage=%v:\n got %s\nwant %s", inc, got, want.Bytes())
				}
			}
		})
	}
	// A stored answer that happens to contain a placeholder gets no view.
	if v, _ := renderCached([]byte(`{"id":"x","created":1,"choices":[{"message":{"content":"` + holeID + `"}}]}`)); v != nil {
		t.Error("view made for a body containing the id placeholder")
	}
	if v, _ := renderCached([]byte(`{"id":"x","created":1,"n":-7393917739}`)); v != nil {
		t.Error("view made for a body containing the created placeholder")
	}
	// Not JSON: no view (the slow path returns it as is).
	if v, _ := renderCached([]byte("plain text")); v != nil {
		t.Error("view made for a non-JSON body")
	}
}
