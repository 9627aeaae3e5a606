package gateway

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// startStream begins a streaming request and returns once its first event
// arrived; the body is read to the end in the background.
func startStream(t *testing.T, url, body string) <-chan string {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	out := make(chan string, 1)
	first := make([]byte, 6)
	if _, err := io.ReadFull(resp.Body, first); err != nil {
		t.Fatal(err)
	}
	go func() {
		rest, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		out <- string(first) + string(rest)
	}()
	return out
}

func newServerOn(t *testing.T, lm *LocalModel) (*Server, string) {
	s, err := New(Options{Config: DefaultConfig(), Models: []*LocalModel{lm}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(ln) }()
	return s, "http://" + ln.Addr().String()
}

func TestShutdownFinishesInFlightStream(t *testing.T) {
	s, url := newServerOn(t, shippedModel(t))
	body := startStream(t, url+"/v1/chat/completions", `{"model":"specgate-target","stream":true,"temperature":0,"max_tokens":60,"messages":[{"role":"user","content":"What does ephemeral mean?"}]}`)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Shutdown(ctx) }()
	time.Sleep(50 * time.Millisecond)
	if _, err := http.Get(url + "/healthz"); err == nil {
		t.Error("new connection accepted during shutdown")
	}
	got := <-body
	if err := <-done; err != nil {
		t.Errorf("Shutdown = %v, want nil (stream finished in time)", err)
	}
	if !strings.HasSuffix(got, "data: [DONE]\n\n") || !strings.Contains(got, `"finish_reason":"stop"`) && !strings.Contains(got, `"finish_reason":"length"`) {
		t.Errorf("in-flight stream did not finish normally: %q", got)
	}
}

func TestShutdownDeadlineCancelsGeneration(t *testing.T) {
	lm, _ := randomModel(t)
	s, url := newServerOn(t, lm)
	body := startStream(t, url+"/v1/chat/completions", `{"model":"random","stream":true,"temperature":0,"max_tokens":3900,"messages":[{"role":"user","content":"go on forever"}]}`)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := s.Shutdown(ctx)
	if !errors.Is(err, ErrShuttingDown) {
		t.Errorf("Shutdown = %v, want ErrShuttingDown after the deadline", err)
	}
	select {
	case got := <-body:
		if !strings.Contains(got, `"code":"service_unavailable"`) || !strings.HasSuffix(got, "data: [DONE]\n\n") {
			t.Errorf("cancelled stream should end with an error event and [DONE]: %q", got[max(0, len(got)-300):])
		}
	case <-time.After(10 * time.Second):
		t.Fatal("stream still open 10s after the shutdown deadline")
	}
	if held := heldBlocks(lm.KV); held != 0 {
		t.Errorf("KV blocks held after shutdown = %d", held)
	}
}
