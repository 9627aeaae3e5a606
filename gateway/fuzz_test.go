package gateway

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// Request decoders get untrusted bytes: whatever arrives, decoding and
// validation must not panic, must answer a 400 with a message when they
// refuse, and must only accept what the engine can run.

var fuzzChatSeeds = []string{
	`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
	`{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],"max_tokens":5,"n":2,"stop":["x","y"],"temperature":0,"top_p":0.5,"seed":3,"logprobs":true,"top_logprobs":2}`,
	`{"model":"m","messages":[{"role":"assistant","content":null},{"role":"user"}]}`,
	`{"model":"m","messages":[{"role":"user","content":5}]}`,
	`{"model":"m","messages":[],"stream":true,"stream_options":{"include_usage":true}}`,
	`{"model":"m","messages":[{"role":"tool","content":"x","tool_calls":[]}],"max_completion_tokens":-1}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"user":"u","response_format":{"type":"json_object"}}`,
	`{"messages":[{"role":"user","content":[{"type":"image_url"}]}],"stop":"s","presence_penalty":3}`,
	`[1,2]`, `null`, `{"messages":{"role":"user"}}`, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"\\ud800\"}]}",
}

var fuzzCompletionSeeds = []string{
	`{"model":"m","prompt":"hello","max_tokens":3}`,
	`{"model":"m","prompt":["a","b"],"n":2,"echo":true}`,
	`{"model":"m","prompt":[1,2,3],"logprobs":2}`,
	`{"model":"m","prompt":[[1],[2,3]],"best_of":1}`,
	`{"model":"m","prompt":[],"suffix":"x"}`,
	`{"model":"m","prompt":[[]],"stream_options":{}}`,
	`{"model":"m","prompt":7}`, `{"model":"m"}`, `""`, `{"prompt":["a",1]}`,
	`{"model":"m","prompt":"x","max_tokens":99999999,"temperature":-1}`,
}

func fuzzServer() (*Server, *LocalModel) {
	return &Server{cfg: DefaultConfig()}, fakeModel("m", &fakeGen{Reply: "ok"})
}

// checkRefusal: a refusal is a 400 with a message (never a panic, never
// another status for bad input).
func checkRefusal(t *testing.T, err *APIError) {
	t.Helper()
	if err.Status != 400 || err.Message == "" || err.Type != "invalid_request_error" {
		t.Fatalf("refusal %+v: want a 400 invalid_request_error with a message", err)
	}
	if !errors.Is(err, ErrInvalidParams) {
		t.Fatalf("refusal %+v does not wrap ErrInvalidParams", err)
	}
}

// checkJob: an accepted job is one the engine can run within the model.
func checkJob(t *testing.T, s *Server, m *LocalModel, j *job) {
	t.Helper()
	if j.n < 1 || j.n > s.cfg.Server.MaxN || len(j.prompts) == 0 || len(j.echo) != len(j.prompts) {
		t.Fatalf("accepted job with n=%d, %d prompts, %d echoes", j.n, len(j.prompts), len(j.echo))
	}
	for _, p := range j.prompts {
		if len(p) == 0 || len(p) >= m.ContextLength || len(p)+j.gen.MaxTokens > m.ContextLength {
			t.Fatalf("accepted prompt of %d tokens + %d max_tokens for a context of %d", len(p), j.gen.MaxTokens, m.ContextLength)
		}
	}
	sp := j.gen.Sampling
	if sp.Temperature < 0 || sp.Temperature > 2 || sp.TopP <= 0 || sp.TopP > 1 || j.gen.MaxTokens < 0 || len(j.gen.Stop) > 4 {
		t.Fatalf("accepted out-of-range parameters: %+v max_tokens %d stop %q", sp, j.gen.MaxTokens, j.gen.Stop)
	}
	if j.reserveTokens() <= 0 {
		t.Fatalf("accepted job reserves %d tokens", j.reserveTokens())
	}
}

func FuzzChatRequest(f *testing.F) {
	for _, s := range fuzzChatSeeds {
		f.Add([]byte(s))
	}
	s, m := fuzzServer()
	f.Fuzz(func(t *testing.T, body []byte) {
		var head modelOnly
		if err := decodeJSON(body, &head); err != nil {
			checkRefusal(t, err)
			return
		}
		var req ChatCompletionRequest
		if err := decodeJSON(body, &req); err != nil {
			checkRefusal(t, err)
			return
		}
		if err := checkUser(req.User); err != nil {
			checkRefusal(t, err)
		}
		j, err := s.chatJob(m, &req)
		if err != nil {
			checkRefusal(t, err)
			return
		}
		for i, msg := range req.Messages {
			if msg.Content.absent {
				t.Fatalf("accepted message %d without content", i)
			}
		}
		checkJob(t, s, m, j)
	})
}

func FuzzCompletionRequest(f *testing.F) {
	for _, s := range fuzzCompletionSeeds {
		f.Add([]byte(s))
	}
	s, m := fuzzServer()
	f.Fuzz(func(t *testing.T, body []byte) {
		var req CompletionRequest
		if err := decodeJSON(body, &req); err != nil {
			checkRefusal(t, err)
			return
		}
		j, err := s.completionJob(m, &req)
		if err != nil {
			checkRefusal(t, err)
			return
		}
		checkJob(t, s, m, j)
	})
}

// An upstream's stream chunks are untrusted: assembling them never panics,
// and an assembled answer is a chat completion whose content is exactly the
// content deltas of its chunks, in order.
func FuzzChatAssembler(f *testing.F) {
	for _, s := range []string{
		`{"id":"a","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"he"},"finish_reason":null}]}` + "\n" +
			`{"id":"a","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"llo"},"finish_reason":"stop"}]}`,
		`{"object":"chat.completion.chunk","choices":[{"index":1,"delta":{"content":"x"},"finish_reason":"length"},{"index":0,"delta":{},"finish_reason":"stop"}]}`,
		`{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"tool_calls":[]},"finish_reason":"stop"}]}`,
		`{"object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}`,
		`{"object":"chat.completion.chunk","choices":[{"index":-1}]}`, `[]`, `null`, `{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":5}}]}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		var a chatAssembler
		want := map[int]string{}
		for _, line := range strings.Split(in, "\n") {
			a.add([]byte(line))
			var ch upstreamChunk
			if json.Unmarshal([]byte(line), &ch) == nil {
				for _, c := range ch.Choices {
					var text string
					if v, ok := c.Delta["content"]; ok && json.Unmarshal(v, &text) == nil {
						want[c.Index] += text
					}
				}
			}
		}
		b, _, ok := a.body()
		if !ok {
			return
		}
		var got ChatCompletion
		if err := json.Unmarshal(b, &got); err != nil || got.Object != "chat.completion" {
			t.Fatalf("assembled %s: %v", b, err)
		}
		for _, c := range got.Choices {
			if c.Message.Content != want[c.Index] || c.FinishReason == "" {
				t.Fatalf("choice %d: %q (finish %q), chunks say %q", c.Index, c.Message.Content, c.FinishReason, want[c.Index])
			}
		}
	})
}

// Message normalisation never panics, and every message's key text starts
// with its normalised text.
func FuzzNormalizeChat(f *testing.F) {
	for _, s := range fuzzChatSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		var r ChatCompletionRequest
		if json.Unmarshal([]byte(in), &r) != nil {
			return
		}
		n := normalizeChat(r.Messages)
		if len(n) != len(r.Messages) {
			t.Fatalf("%d messages normalised to %d", len(r.Messages), len(n))
		}
		_, msgs := cacheMessages(n)
		k := 0
		for _, m := range n {
			if m.role == "system" {
				continue
			}
			if !strings.HasPrefix(msgs[k].Content, m.text) || (m.extra != "" && !json.Valid([]byte(m.extra))) {
				t.Fatalf("message %q / %q -> key %q", m.text, m.extra, msgs[k].Content)
			}
			k++
		}
	})
}
