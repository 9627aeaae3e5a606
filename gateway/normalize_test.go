package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/specgate/specgate/cache"
	"github.com/specgate/specgate/tokenizer"
)

// templateTokenizer records the messages the chat template was given.
type templateTokenizer struct {
	byteTokenizer
	mu   sync.Mutex
	seen [][]tokenizer.Message
}

func (t *templateTokenizer) RenderChat(msgs []tokenizer.Message, _ bool) (string, error) {
	t.mu.Lock()
	t.seen = append(t.seen, append([]tokenizer.Message(nil), msgs...))
	t.mu.Unlock()
	var b bytes.Buffer
	for _, m := range msgs {
		b.WriteString("<" + m.Role + ">" + m.Content)
	}
	return b.String(), nil
}
func (t *templateTokenizer) HasChatTemplate() bool { return true }

func (t *templateTokenizer) last() []tokenizer.Message {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.seen) == 0 {
		return nil
	}
	return t.seen[len(t.seen)-1]
}

// keyRecorder is a ResponseCache that records every request it is asked
// about and always misses.
type keyRecorder struct {
	mu   sync.Mutex
	reqs []*cache.Request
}

func (k *keyRecorder) add(r *cache.Request) {
	k.mu.Lock()
	k.reqs = append(k.reqs, r)
	k.mu.Unlock()
}

func (k *keyRecorder) last() *cache.Request {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.reqs) == 0 {
		return nil
	}
	return k.reqs[len(k.reqs)-1]
}

func (k *keyRecorder) Get(_ context.Context, r *cache.Request) (cache.Lookup, error) {
	k.add(r)
	return cache.Lookup{}, nil
}
func (k *keyRecorder) Put(context.Context, *cache.Request, []byte, float64) error { return nil }
func (k *keyRecorder) Do(ctx context.Context, r *cache.Request, gen cache.Generator) (cache.Lookup, []byte, error) {
	k.add(r)
	b, _, err := gen(ctx)
	return cache.Lookup{}, b, err
}

// One normalisation feeds the local engine, the cache key of a local model,
// the cache key of an upstream model and the upstream itself: the same
// messages sent to a local and to an upstream model must give the chat
// template, both cache keys and the upstream the hand-written expectations
// below.
func TestNormalisationConsumersAgree(t *testing.T) {
	var upMu sync.Mutex
	var upBody []byte
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		upMu.Lock()
		upBody = b
		upMu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","created":1,"model":"up","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	}))
	defer up.Close()
	cfg := DefaultConfig()
	cfg.Upstreams = []UpstreamConfig{{Name: "u", BaseURL: up.URL + "/v1", Models: []string{"up"}}}
	if err := cfg.Complete(); err != nil {
		t.Fatal(err)
	}
	tok := &templateTokenizer{}
	lm := fakeModel("loc", &fakeGen{Reply: "ok"})
	lm.Tokenizer = tok
	keys := &keyRecorder{}
	ts := startServer(t, Options{Config: cfg, Models: []*LocalModel{lm}, Cache: keys})

	type msg = tokenizer.Message
	for _, tc := range []struct {
		name     string
		messages string
		template []msg           // what the local chat template gets
		system   string          // cache namespace text
		key      []cache.Message // cache key messages
	}{
		{"plain", `[{"role":"user","content":"What is a monad?"}]`,
			[]msg{{Role: "user", Content: "What is a monad?"}}, "", []cache.Message{{Role: "user", Content: "What is a monad?"}}},
		{"developer is system, systems joined", `[{"role":"system","content":"Be brief."},{"role":"developer","content":"Use French."},{"role":"user","content":"Hi"}]`,
			[]msg{{Role: "system", Content: "Be brief."}, {Role: "system", Content: "Use French."}, {Role: "user", Content: "Hi"}},
			"Be brief.\nUse French.", []cache.Message{{Role: "user", Content: "Hi"}}},
		{"text parts joined by newline", `[{"role":"user","content":[{"type":"text","text":"first"},{"type":"text","text":"second"}]}]`,
			[]msg{{Role: "user", Content: "first\nsecond"}}, "", []cache.Message{{Role: "user", Content: "first\nsecond"}}},
		{"conversation, assistant null content", `[{"role":"user","content":"a"},{"role":"assistant","content":null},{"role":"user","content":"b"}]`,
			[]msg{{Role: "user", Content: "a"}, {Role: "assistant", Content: ""}, {Role: "user", Content: "b"}}, "",
			[]cache.Message{{Role: "user", Content: "a"}, {Role: "assistant", Content: ""}, {Role: "user", Content: "b"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var keyLocal, keyUp *cache.Request
			for _, model := range []string{"loc", "up"} {
				body := `{"model":"` + model + `","temperature":0,"max_tokens":4,"messages":` + tc.messages + `}`
				if r := post(t, ts.URL+"/v1/chat/completions", "", body, nil); r.status != 200 {
					t.Fatalf("%s: status %d: %s", model, r.status, r.body)
				}
				if model == "loc" {
					keyLocal = keys.last()
					if got := tok.last(); !reflect.DeepEqual(got, tc.template) {
						t.Errorf("chat template got %q, want %q", got, tc.template)
					}
				} else {
					keyUp = keys.last()
					upMu.Lock()
					var sent, got struct{ Messages json.RawMessage }
					_ = json.Unmarshal([]byte(body), &sent)
					_ = json.Unmarshal(upBody, &got)
					upMu.Unlock()
					if !jsonEqual(t, sent.Messages, got.Messages) {
						t.Errorf("upstream got messages %s, client sent %s", got.Messages, sent.Messages)
					}
				}
			}
			if keyLocal == nil || keyUp == nil || keyLocal == keyUp {
				t.Fatalf("cache not consulted for both models: %v %v", keyLocal, keyUp)
			}
			for name, k := range map[string]*cache.Request{"local": keyLocal, "upstream": keyUp} {
				if k.System != tc.system || !reflect.DeepEqual(k.Messages, tc.key) {
					t.Errorf("%s cache key: system %q messages %q; want %q %q", name, k.System, k.Messages, tc.system, tc.key)
				}
			}
		})
	}

	// Upstreams take what local models reject: non-text parts and tool
	// calls are part of the key messages (which key_mode last-user reduces
	// to the last user message: TestEarlierToolTurnsSeparateEntries checks
	// the entries themselves).
	keyOf := func(messages string) []cache.Message {
		body := `{"model":"up","temperature":0,"messages":` + messages + `}`
		if r := post(t, ts.URL+"/v1/chat/completions", "", body, nil); r.status != 200 {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
		return keys.last().Messages
	}
	img := func(url string) string {
		return `[{"role":"user","content":[{"type":"text","text":"What is this?"},{"type":"image_url","image_url":{"url":"` + url + `"}}]}]`
	}
	a, b := keyOf(img("https://example.com/cat.png")), keyOf(img("https://example.com/dog.png"))
	if reflect.DeepEqual(a, b) {
		t.Errorf("two images, one key: %q", a)
	}
	want := "What is this?\n" + `{"content":[{"type":"image_url","image_url":{"url":"https://example.com/cat.png"}}]}`
	if len(a) != 1 || a[0].Content != want {
		t.Errorf("image key %q, want %q", a, want)
	}
	call := func(args string) string {
		return `[{"role":"user","content":"weather?"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"w","arguments":"` + args + `"}}]},{"role":"tool","tool_call_id":"c1","content":"sunny"},{"role":"user","content":"and tomorrow?"}]`
	}
	if x, y := keyOf(call(`{}`)), keyOf(call(`{\"d\":1}`)); reflect.DeepEqual(x, y) {
		t.Errorf("two tool calls, one key: %q", x)
	} else if x[1].Content != `
{"tool_calls":[{"id":"c1","type":"function","function":{"name":"w","arguments":"{}"}}]}` || x[2].Content != "sunny\n"+`{"tool_call_id":"c1"}` {
		t.Errorf("tool call key %q", x)
	}
}

// Under the default key_mode last-user the entry key is the last user
// message only, so a conversation whose earlier turns carry tool calls, tool
// results or names must get its own entry through the namespace
// (contextHash): it is never answered from an entry made without them or
// with other ones. Earlier plain text still shares (last-user's choice).
// Before contextHash every request below after the first was a HIT-EXACT of
// the first one's entry.
func TestEarlierToolTurnsSeparateEntries(t *testing.T) {
	var calls atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		n := calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"x","object":"chat.completion","created":1,"model":"up","choices":[{"index":0,"message":{"role":"assistant","content":"answer %d"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`, n)
	}))
	defer up.Close()
	cfg := DefaultConfig()
	cfg.Upstreams = []UpstreamConfig{{Name: "u", BaseURL: up.URL + "/v1", Models: []string{"up"}}}
	if err := cfg.Complete(); err != nil {
		t.Fatal(err)
	}
	if m := cache.DefaultConfig().KeyMode; m != "" && m != cache.KeyLastUser {
		t.Fatalf("default key mode %q; this test is about last-user", m)
	}
	ts := startServer(t, Options{Config: cfg, Cache: newTestCache(t)})
	call := func(args, result, name string) string {
		return `[{"role":"user","content":"weather?"` + name + `},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"w","arguments":"` + args + `"}}]},{"role":"tool","tool_call_id":"c1","content":"` + result + `"},{"role":"user","content":"and tomorrow?"}]`
	}
	for i, tc := range []struct {
		name, messages, xcache string
		answer                 int // the upstream call whose answer comes back
	}{
		{"plain", `[{"role":"user","content":"and tomorrow?"}]`, "MISS", 1},
		{"earlier plain text shares", `[{"role":"user","content":"hello"},{"role":"assistant","content":"hi"},{"role":"user","content":"and tomorrow?"}]`, "HIT-EXACT", 1},
		{"tool turns: not the plain entry", call(`{}`, "sunny", ""), "MISS", 2},
		{"same tool turns again", call(`{}`, "sunny", ""), "HIT-EXACT", 2},
		{"other tool call arguments", call(`{\"d\":1}`, "sunny", ""), "MISS", 3},
		{"other tool result", call(`{}`, "rainy", ""), "MISS", 4},
		{"a name on an earlier message", call(`{}`, "sunny", `,"name":"bob"`), "MISS", 5},
		{"tool result again", call(`{}`, "rainy", ""), "HIT-EXACT", 4},
	} {
		body := `{"model":"up","temperature":0,"messages":` + tc.messages + `}`
		r := post(t, ts.URL+"/v1/chat/completions", "", body, nil)
		got, _ := chatContent(t, r.body)
		t.Logf("%d %s: %s %q", i, tc.name, r.xcache, got)
		if r.status != 200 || r.xcache != tc.xcache || got != fmt.Sprintf("answer %d", tc.answer) {
			t.Errorf("%s: status %d, X-Cache %s, answer %q; want %s, \"answer %d\"", tc.name, r.status, r.xcache, got, tc.xcache, tc.answer)
		}
	}
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return reflect.DeepEqual(x, y)
}
