package gateway

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/specgate/specgate/cache"
)

// The conformance suite drives the gateway with go-openai, once against the
// local engine serving the shipped model, once through an upstream (a second
// in-process gateway serving the same model).

const embedModel = "specgate-embed"

func openaiClient(baseURL, key string) *openai.Client {
	cfg := openai.DefaultConfig(key)
	cfg.BaseURL = baseURL + "/v1"
	return openai.NewClientWithConfig(cfg)
}

func lexical(t testing.TB) cache.Embedder {
	t.Helper()
	e, err := cache.NewLexical(cache.DefaultLexicalDim)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// localGateway serves the shipped model locally (with the lexical embedder).
func localGateway(t *testing.T) *testServer {
	return startServer(t, Options{Models: []*LocalModel{shippedModel(t)}, Embedders: map[string]cache.Embedder{embedModel: lexical(t)}})
}

// upstreamGateway fronts localGateway as an upstream: the models are served
// by the second server, reached through the proxy path.
func upstreamGateway(t *testing.T) *testServer {
	back := localGateway(t)
	cfg := DefaultConfig()
	cfg.Models = nil
	cfg.Upstreams = []UpstreamConfig{{Name: "back", BaseURL: back.URL + "/v1", APIKeyEnv: "BACK_KEY",
		Models: []string{"specgate-target", embedModel}, Aliases: map[string]string{"specgate": "specgate-target"}, Retries: 1}}
	cfg.applyDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return startServer(t, Options{Config: cfg, Getenv: func(string) string { return "" }})
}

func TestConformanceLocal(t *testing.T) {
	conformance(t, localGateway(t), "local")
}

func TestConformanceUpstream(t *testing.T) {
	conformance(t, upstreamGateway(t), "upstream")
}

func conformance(t *testing.T, ts *testServer, mode string) {
	ctx := context.Background()
	cl := openaiClient(ts.URL, "unused")
	seed := 7
	msgs := []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: "What does ephemeral mean?"}}

	t.Run("models", func(t *testing.T) {
		list, err := cl.ListModels(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ids := map[string]bool{}
		for _, m := range list.Models {
			ids[m.ID] = true
			if m.Object != "model" || m.OwnedBy == "" {
				t.Errorf("model %+v: want object model and an owner", m)
			}
		}
		for _, want := range []string{"specgate-target", "specgate", embedModel} {
			if !ids[want] {
				t.Errorf("ListModels lacks %s: %v", want, ids)
			}
		}
		m, err := cl.GetModel(ctx, "specgate")
		if err != nil || m.ID != "specgate" {
			t.Errorf("GetModel(specgate) = %+v, %v", m, err)
		}
		_, err = cl.GetModel(ctx, "nope")
		var ae *openai.APIError
		if !errors.As(err, &ae) || ae.HTTPStatusCode != 404 {
			t.Errorf("GetModel(nope) err = %v, want 404", err)
		}
	})

	var chatText string
	t.Run("chat", func(t *testing.T) {
		resp, err := cl.CreateChatCompletion(ctx, openai.ChatCompletionRequest{Model: "specgate-target", Messages: msgs, MaxTokens: 24, Seed: &seed})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Object != "chat.completion" || !strings.HasPrefix(resp.ID, "chatcmpl-") || resp.Created == 0 || resp.Model != "specgate-target" {
			t.Errorf("envelope = %+v", resp)
		}
		if len(resp.Choices) != 1 || resp.Choices[0].Message.Role != "assistant" || resp.Choices[0].Message.Content == "" {
			t.Fatalf("choices = %+v", resp.Choices)
		}
		fr := resp.Choices[0].FinishReason
		if fr != openai.FinishReasonStop && fr != openai.FinishReasonLength {
			t.Errorf("finish_reason = %q", fr)
		}
		u := resp.Usage
		if u.PromptTokens == 0 || u.CompletionTokens == 0 || u.TotalTokens != u.PromptTokens+u.CompletionTokens || u.PromptTokensDetails == nil {
			t.Errorf("usage = %+v", u)
		}
		if u.CompletionTokens > 24 || (fr == openai.FinishReasonLength && u.CompletionTokens != 24) {
			t.Errorf("completion tokens %d with finish %s and max_tokens 24", u.CompletionTokens, fr)
		}
		chatText = resp.Choices[0].Message.Content
		// Same seed, same answer; and the repeated prompt is served from the prefix cache.
		again, err := cl.CreateChatCompletion(ctx, openai.ChatCompletionRequest{Model: "specgate", Messages: msgs, MaxTokens: 24, Seed: &seed})
		if err != nil {
			t.Fatal(err)
		}
		if again.Choices[0].Message.Content != chatText {
			t.Errorf("seeded repeat differs: %q vs %q", again.Choices[0].Message.Content, chatText)
		}
		if again.Usage.PromptTokensDetails == nil || again.Usage.PromptTokensDetails.CachedTokens == 0 {
			t.Errorf("repeat usage %+v: want prompt_tokens_details.cached_tokens > 0", again.Usage)
		}
	})

	t.Run("chat stream", func(t *testing.T) {
		st, err := cl.CreateChatCompletionStream(ctx, openai.ChatCompletionRequest{Model: "specgate-target", Messages: msgs, MaxTokens: 24, Seed: &seed,
			Stream: true, StreamOptions: &openai.StreamOptions{IncludeUsage: true}})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		var text strings.Builder
		var usage *openai.Usage
		finishes := 0
		for {
			chunk, err := st.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if chunk.Object != "chat.completion.chunk" {
				t.Errorf("object = %q", chunk.Object)
			}
			if chunk.Usage != nil {
				if len(chunk.Choices) != 0 {
					t.Errorf("usage chunk has %d choices, want 0", len(chunk.Choices))
				}
				usage = chunk.Usage
			}
			for _, c := range chunk.Choices {
				text.WriteString(c.Delta.Content)
				if c.FinishReason != "" {
					finishes++
				}
			}
		}
		if text.String() != chatText {
			t.Errorf("streamed text %q != non-streamed %q", text.String(), chatText)
		}
		if finishes != 1 || usage == nil || usage.CompletionTokens == 0 {
			t.Errorf("finishes = %d, usage = %+v", finishes, usage)
		}
	})

	t.Run("chat n=2", func(t *testing.T) {
		resp, err := cl.CreateChatCompletion(ctx, openai.ChatCompletionRequest{Model: "specgate-target", Messages: msgs, MaxTokens: 8, N: 2, Seed: &seed})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Choices) != 2 || resp.Choices[0].Index != 0 || resp.Choices[1].Index != 1 {
			t.Fatalf("choices = %+v", resp.Choices)
		}
	})

	t.Run("completions", func(t *testing.T) {
		resp, err := cl.CreateCompletion(ctx, openai.CompletionRequest{Model: "specgate-target", Prompt: "func main() {", MaxTokens: 12, Seed: &seed})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Object != "text_completion" || len(resp.Choices) != 1 || resp.Choices[0].Text == "" || resp.Usage.CompletionTokens == 0 {
			t.Fatalf("completion = %+v", resp)
		}
		st, err := cl.CreateCompletionStream(ctx, openai.CompletionRequest{Model: "specgate-target", Prompt: "func main() {", MaxTokens: 12, Seed: &seed, Stream: true})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		var text strings.Builder
		for {
			chunk, err := st.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range chunk.Choices {
				text.WriteString(c.Text)
			}
		}
		if text.String() != resp.Choices[0].Text {
			t.Errorf("streamed %q != %q", text.String(), resp.Choices[0].Text)
		}
	})

	t.Run("embeddings", func(t *testing.T) {
		resp, err := cl.CreateEmbeddings(ctx, openai.EmbeddingRequest{Model: embedModel, Input: []string{"what is a cat", "what is a dog"}})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Data) != 2 || len(resp.Data[0].Embedding) != cache.DefaultLexicalDim || resp.Data[1].Index != 1 {
			t.Fatalf("embeddings: %d vectors", len(resp.Data))
		}
		b64, err := cl.CreateEmbeddings(ctx, openai.EmbeddingRequest{Model: embedModel, Input: "what is a cat", EncodingFormat: openai.EmbeddingEncodingFormatBase64})
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range b64.Data[0].Embedding {
			if v != resp.Data[0].Embedding[i] {
				t.Fatalf("base64 vector differs at %d", i)
			}
		}
	})

	t.Run("errors", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			req    openai.ChatCompletionRequest
			status int
			param  string
		}{
			{"unknown model", openai.ChatCompletionRequest{Model: "gpt-7", Messages: msgs}, 404, "model"},
			{"tools", openai.ChatCompletionRequest{Model: "specgate-target", Messages: msgs, Tools: []openai.Tool{{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{Name: "f"}}}}, 400, "tools"},
			{"empty messages", openai.ChatCompletionRequest{Model: "specgate-target", Messages: []openai.ChatCompletionMessage{}}, 400, "messages"},
			{"n too large", openai.ChatCompletionRequest{Model: "specgate-target", Messages: msgs, N: 99}, 400, "n"},
		} {
			_, err := cl.CreateChatCompletion(ctx, tc.req)
			var ae *openai.APIError
			if !errors.As(err, &ae) {
				t.Errorf("%s: err = %v, want *openai.APIError", tc.name, err)
				continue
			}
			if ae.HTTPStatusCode != tc.status || ae.Param == nil || *ae.Param != tc.param || ae.Type != "invalid_request_error" {
				t.Errorf("%s: got status %d param %v type %q, want %d %q", tc.name, ae.HTTPStatusCode, ae.Param, ae.Type, tc.status, tc.param)
			}
		}
	})

	t.Run("request id", func(t *testing.T) {
		req, _ := http.NewRequest("GET", ts.URL+"/v1/models", nil)
		req.Header.Set("X-Request-ID", "abc-123")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("X-Request-ID"); got != "abc-123" {
			t.Errorf("X-Request-ID = %q, want echo", got)
		}
	})
	_ = mode
}

// TestAuthAndRateLimits checks 401 for missing and wrong keys, tenant
// routing, and 429 with Retry-After for both limits.
func TestAuthAndRateLimits(t *testing.T) {
	cfg := DefaultConfig()
	keys, _ := ParseAPIKeys("key-a=tenantA,key-b=tenantB")
	cfg.Auth.Keys = append(keys, KeyConfig{Key: "key-slow", Tenant: "slow", Limits: &Limits{RequestsPerSecond: 0.01, Burst: 1}},
		KeyConfig{Key: "key-tok", Tenant: "tok", Limits: &Limits{TokensPerMinute: 10}})
	ts := startServer(t, Options{Config: cfg, Models: []*LocalModel{shippedModel(t)}})
	ctx := context.Background()
	msgs := []openai.ChatCompletionMessage{{Role: "user", Content: "What does candid mean?"}}
	status := func(key string) (int, *openai.APIError) {
		_, err := openaiClient(ts.URL, key).CreateChatCompletion(ctx, openai.ChatCompletionRequest{Model: "specgate-target", Messages: msgs, MaxTokens: 4})
		if err == nil {
			return 200, nil
		}
		var ae *openai.APIError
		if errors.As(err, &ae) {
			return ae.HTTPStatusCode, ae
		}
		t.Fatalf("unexpected error %v", err)
		return 0, nil
	}
	if s, ae := status(""); s != 401 || ae.Code != "invalid_api_key" {
		t.Errorf("no key: %d %+v", s, ae)
	}
	if s, _ := status("wrong"); s != 401 {
		t.Errorf("wrong key: %d", s)
	}
	if s, _ := status("key-a"); s != 200 {
		t.Errorf("key-a: %d", s)
	}
	if s, _ := status("key-slow"); s != 200 {
		t.Errorf("key-slow first: %d", s)
	}
	if s, ae := status("key-slow"); s != 429 || ae.Type != "requests" {
		t.Errorf("key-slow second: %d %+v", s, ae)
	}
	if s, _ := status("key-tok"); s != 200 {
		t.Errorf("key-tok first: %d", s)
	}
	if s, ae := status("key-tok"); s != 429 || ae.Type != "tokens" {
		t.Errorf("key-tok after spending its budget: %d %+v", s, ae)
	}
	req, _ := http.NewRequest("POST", ts.URL+"/v1/chat/completions", strings.NewReader(`{"model":"specgate-target","messages":[{"role":"user","content":"x"}]}`))
	req.Header.Set("Authorization", "Bearer key-slow")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
		t.Errorf("429 without Retry-After: %d %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if resp.Header.Get("X-Ratelimit-Limit-Requests") != "1" || resp.Header.Get("X-Ratelimit-Remaining-Requests") != "0" {
		t.Errorf("rate-limit headers: limit %q remaining %q", resp.Header.Get("X-Ratelimit-Limit-Requests"), resp.Header.Get("X-Ratelimit-Remaining-Requests"))
	}
	// Health endpoints need no key.
	if r, err := http.Get(ts.URL + "/healthz"); err != nil || r.StatusCode != 200 {
		t.Errorf("healthz: %v %v", r, err)
	}
}
