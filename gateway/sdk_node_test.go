package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/specgate/specgate/cache"
	"github.com/specgate/specgate/engine"
)

// nodePeers returns tools/node when node and its npm packages (installed by
// scripts/node-peers.sh) are present, or skips saying why.
func nodePeers(t *testing.T, pkg string) string {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node not on PATH: the official OpenAI Node SDK is the reference; install Node.js and run scripts/node-peers.sh")
	}
	dir, err := filepath.Abs("../tools/node")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", pkg, "package.json")); err != nil {
		t.Skipf("tools/node/node_modules/%s missing: run scripts/node-peers.sh (npm install, cached)", pkg)
	}
	return dir
}

// TestNodeSDK runs tools/node/sdk_check.mjs: the official OpenAI Node SDK
// (responses.create plain and streamed, responses.stream, previous_response_id,
// responses.retrieve, embeddings with dimensions, chat withResponse headers)
// and LangChain's ChatOpenAI against a gateway serving the shipped model,
// and the Responses checks again through a second gateway that reaches the
// model as an upstream.
func TestNodeSDK(t *testing.T) {
	peers := nodePeers(t, "openai")
	nodePeers(t, "@langchain/openai")
	back := startServer(t, Options{Models: []*LocalModel{shippedModel(t)}, Embedders: map[string]cache.Embedder{embedModel: lexical(t)},
		Cache: newTestCache(t)})
	cfg := DefaultConfig()
	cfg.Models = nil
	cfg.Upstreams = []UpstreamConfig{{Name: "back", BaseURL: back.URL + "/v1", Models: []string{"specgate-target"}, Retries: 1}}
	if err := cfg.Complete(); err != nil {
		t.Fatal(err)
	}
	front := startServer(t, Options{Config: cfg, Getenv: func(string) string { return "" }})
	arg, _ := json.Marshal(map[string]string{"local": back.URL, "upstream": front.URL, "model": "specgate-target", "embed": embedModel})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "sdk_check.mjs", string(arg))
	cmd.Dir = peers
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node sdk_check.mjs: %v\n%s\n%s", err, out, stderr.String())
	}
	var results []struct {
		Name   string `json:"name"`
		OK     bool   `json:"ok"`
		Detail string `json:"detail"`
	}
	if err := json.Unmarshal(out, &results); err != nil {
		t.Fatalf("sdk_check output %q: %v", out, err)
	}
	if len(results) < 11 {
		t.Errorf("%d checks ran, want 11", len(results))
	}
	for _, r := range results {
		if r.OK {
			t.Logf("ok   %s: %s", r.Name, r.Detail)
		} else {
			t.Errorf("FAIL %s: %s", r.Name, r.Detail)
		}
	}
}

// TestCORS: a preflight from a browser origin is answered before auth with
// the allowed methods and the requested headers; actual responses carry
// Access-Control-Allow-Origin and expose X-Cache; a configured origin list
// refuses others; disabled CORS leaves preflights unanswered (404).
func TestCORS(t *testing.T) {
	preflight := func(url, origin string) *http.Response {
		req, _ := http.NewRequest(http.MethodOptions, url+"/v1/chat/completions", nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		req.Header.Set("Access-Control-Request-Headers", "authorization, content-type")
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		return r
	}
	cfg := DefaultConfig()
	cfg.Models = nil
	cfg.Auth.Keys = []KeyConfig{{Key: "sk-test", Tenant: "a"}}
	open := startServer(t, Options{Config: cfg, Embedders: map[string]cache.Embedder{embedModel: lexical(t)}})
	r := preflight(open.URL, "http://localhost:3000")
	if r.StatusCode != http.StatusNoContent || r.Header.Get("Access-Control-Allow-Origin") != "*" ||
		!strings.Contains(r.Header.Get("Access-Control-Allow-Methods"), "POST") || r.Header.Get("Access-Control-Allow-Headers") != "authorization, content-type" {
		t.Errorf("default preflight: %d %v", r.StatusCode, r.Header)
	}
	req, _ := http.NewRequest(http.MethodPost, open.URL+"/v1/embeddings", strings.NewReader(`{"model":"specgate-embed","input":"hi"}`))
	req.Header.Set("Origin", "http://localhost:3000")
	req.Header.Set("Authorization", "Bearer sk-test")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "*" || !strings.Contains(resp.Header.Get("Access-Control-Expose-Headers"), "X-Cache") {
		t.Errorf("actual request: %d %v", resp.StatusCode, resp.Header)
	}

	cfg2 := DefaultConfig()
	cfg2.Models = nil
	cfg2.Server.CORS = CORSConfig{AllowOrigins: []string{"https://app.example.com"}, MaxAge: time.Hour}
	if err := cfg2.Complete(); err != nil {
		t.Fatal(err)
	}
	listed := startServer(t, Options{Config: cfg2})
	if r := preflight(listed.URL, "https://app.example.com"); r.Header.Get("Access-Control-Allow-Origin") != "https://app.example.com" || r.Header.Get("Access-Control-Max-Age") != "3600" {
		t.Errorf("listed origin: %d %v", r.StatusCode, r.Header)
	}
	if r := preflight(listed.URL, "https://evil.example.net"); r.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("unlisted origin allowed: %v", r.Header)
	}
	cfg3 := DefaultConfig()
	cfg3.Models = nil
	cfg3.Server.CORS.Disabled = true
	off := startServer(t, Options{Config: cfg3})
	if r := preflight(off.URL, "http://localhost:3000"); r.StatusCode != http.StatusNotFound || r.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("disabled CORS: %d %v", r.StatusCode, r.Header)
	}
	bad := DefaultConfig()
	bad.Server.CORS.AllowOrigins = []string{"localhost:3000"}
	if err := bad.Complete(); err == nil || !strings.Contains(err.Error(), "server.cors.allow_origins[0]") {
		t.Errorf("bad origin accepted: %v", err)
	}
}

// TestResponsesErrors: requests the Responses endpoint cannot serve get
// OpenAI error JSON naming the parameter, before any generation.
func TestResponsesErrors(t *testing.T) {
	ts := startServer(t, Options{Models: []*LocalModel{fakeModel("m", &fakeGen{})}})
	cases := []struct{ body, param string }{
		{`{"model":"m"}`, "input"},
		{`{"model":"m","input":"hi","tools":[{"type":"web_search"}]}`, "tools"},
		{`{"model":"m","input":"hi","text":{"format":{"type":"json_schema"}}}`, "text.format.type"},
		{`{"model":"m","input":[{"role":"user","content":[{"type":"input_image","image_url":"x"}]}]}`, "input[0].content[0].type"},
		{`{"model":"m","input":[{"role":"tool","content":"x"}]}`, "input[0].role"},
		{`{"model":"m","input":"hi","previous_response_id":"resp_unknown"}`, "previous_response_id"},
		{`{"model":"m","input":"hi","max_output_tokens":0}`, "max_output_tokens"},
		{`{"model":"m","input":42}`, "input"},
	}
	for _, c := range cases {
		r, err := http.Post(ts.URL+"/v1/responses", "application/json", strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		var e struct {
			Error struct {
				Param string `json:"param"`
				Type  string `json:"type"`
			} `json:"error"`
		}
		json.NewDecoder(r.Body).Decode(&e)
		r.Body.Close()
		if r.StatusCode != 400 || e.Error.Param != c.param || e.Error.Type != "invalid_request_error" {
			t.Errorf("%s: %d param %q, want 400 param %q", c.body, r.StatusCode, e.Error.Param, c.param)
		}
	}
	r, err := http.Get(ts.URL + "/v1/responses/resp_nope")
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != 404 {
		t.Errorf("GET unknown response: %d", r.StatusCode)
	}
}

// TestResponsesChainPerTenant: previous_response_id continues a stored
// conversation for the tenant that created it (the earlier turn is in the
// prompt the model sees) and is unknown to another tenant.
func TestResponsesChainPerTenant(t *testing.T) {
	var prompts []string
	gen := &recordingGen{fakeGen: fakeGen{Reply: "fine"}, prompts: &prompts}
	cfg := DefaultConfig()
	cfg.Models = nil
	cfg.Auth.Keys = []KeyConfig{{Key: "ka", Tenant: "a"}, {Key: "kb", Tenant: "b"}}
	if err := cfg.Complete(); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, Options{Config: cfg, Models: []*LocalModel{fakeModel("m", gen)}})
	call := func(key, body string) (int, map[string]any) {
		req, _ := http.NewRequest("POST", ts.URL+"/v1/responses", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Cache-Control", "no-store")
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		var out map[string]any
		json.NewDecoder(r.Body).Decode(&out)
		return r.StatusCode, out
	}
	st, first := call("ka", `{"model":"m","input":"first question","instructions":"be brief"}`)
	if st != 200 {
		t.Fatalf("first: %d %v", st, first)
	}
	id, _ := first["id"].(string)
	if st, out := call("kb", `{"model":"m","input":"x","previous_response_id":"`+id+`"}`); st != 400 {
		t.Errorf("other tenant continued the chain: %d %v", st, out)
	}
	st, second := call("ka", `{"model":"m","input":"second question","previous_response_id":"`+id+`"}`)
	if st != 200 || second["previous_response_id"] != id {
		t.Fatalf("second: %d %v", st, second)
	}
	last := prompts[len(prompts)-1]
	for _, want := range []string{"first question", "fine", "second question"} {
		if !strings.Contains(last, want) {
			t.Errorf("chained prompt %q lacks %q", last, want)
		}
	}
	if strings.Contains(last, "be brief") {
		t.Errorf("instructions of the earlier response carried over: %q", last)
	}
}

// recordingGen is fakeGen that records the decoded prompt of each call.
type recordingGen struct {
	fakeGen
	mu      sync.Mutex
	prompts *[]string
}

func (g *recordingGen) Generate(ctx context.Context, req engine.GenerateRequest, emit func(engine.Chunk) error) (engine.Result, error) {
	g.mu.Lock()
	*g.prompts = append(*g.prompts, byteTokenizer{}.Decode(req.Prompt, false))
	g.mu.Unlock()
	return g.fakeGen.Generate(ctx, req, emit)
}
