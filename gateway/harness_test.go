package gateway

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/tokenizer"
)

// byteTokenizer is a test tokenizer: one id per byte, BOS = 256, no chat
// template (so the gateway's "role: text" fallback is used).
type byteTokenizer struct{}

func (byteTokenizer) Encode(text string, addSpecial bool) []int32 {
	var ids []int32
	if addSpecial {
		ids = append(ids, 256)
	}
	for i := 0; i < len(text); i++ {
		ids = append(ids, int32(text[i]))
	}
	return ids
}

func (byteTokenizer) Decode(ids []int32, skipSpecial bool) string {
	var b []byte
	for _, id := range ids {
		if id < 256 {
			b = append(b, byte(id))
		}
	}
	return string(b)
}

func (byteTokenizer) RenderChat([]tokenizer.Message, bool) (string, error) {
	return "", tokenizer.ErrNoChatTemplate
}
func (byteTokenizer) HasChatTemplate() bool { return false }

// fakeGen is a Generator for tests that must inject failures: it emits
// Reply one byte per chunk (every Delay), honours MaxTokens, Stop and ctx,
// and fails with Err after FailAfter chunks when Err is set.
type fakeGen struct {
	Reply     string
	Delay     time.Duration
	Err       error
	FailAfter int
	Gate      chan struct{} // when set, Generate waits for it to close first
	active    atomic.Int32
	calls     atomic.Int32
}

func (f *fakeGen) Generate(ctx context.Context, req engine.GenerateRequest, emit func(engine.Chunk) error) (engine.Result, error) {
	f.calls.Add(1)
	f.active.Add(1)
	defer f.active.Add(-1)
	if f.Gate != nil {
		select {
		case <-f.Gate:
		case <-ctx.Done():
			return engine.Result{PromptTokens: len(req.Prompt), Finish: engine.FinishCancelled}, context.Cause(ctx)
		}
	}
	res := engine.Result{PromptTokens: len(req.Prompt), Finish: engine.FinishStop}
	var out strings.Builder
	for i := 0; i < len(f.Reply); i++ {
		if req.MaxTokens > 0 && i >= req.MaxTokens {
			res.Finish = engine.FinishLength
			return res, nil
		}
		if f.Err != nil && i >= f.FailAfter {
			return res, f.Err
		}
		if f.Delay > 0 {
			select {
			case <-time.After(f.Delay):
			case <-ctx.Done():
				res.Finish = engine.FinishCancelled
				return res, context.Cause(ctx)
			}
		}
		if err := ctx.Err(); err != nil {
			res.Finish = engine.FinishCancelled
			return res, context.Cause(ctx)
		}
		out.WriteByte(f.Reply[i])
		for _, st := range req.Stop {
			if strings.HasSuffix(out.String(), st) {
				return res, nil
			}
		}
		c := engine.Chunk{Tokens: []int32{int32(f.Reply[i])}, Text: f.Reply[i : i+1],
			Logprobs: []engine.TokenLogprob{{Token: int32(f.Reply[i]), Text: f.Reply[i : i+1], Logprob: -0.25}}}
		if req.Sampling.Logprobs > 0 {
			c.Top = [][]engine.TokenLogprob{{{Token: int32(f.Reply[i]), Text: f.Reply[i : i+1], Logprob: -0.25}}}
		}
		if err := emit(c); err != nil {
			res.Finish = engine.FinishCancelled
			return res, err
		}
		res.CompletionTokens++
	}
	return res, nil
}

// testServer runs a Server on a loopback listener.
type testServer struct {
	*Server
	URL string
}

func startServer(t testing.TB, opts Options) *testServer {
	t.Helper()
	if opts.Config == nil {
		opts.Config = DefaultConfig()
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil && !errors.Is(err, ErrShuttingDown) {
			t.Logf("shutdown: %v", err)
		}
	})
	return &testServer{Server: s, URL: "http://" + ln.Addr().String()}
}

func fakeModel(name string, g engine.Generator) *LocalModel {
	return &LocalModel{Name: name, Generator: g, Tokenizer: byteTokenizer{}, ContextLength: 4096, Created: time.Unix(1700000000, 0)}
}
