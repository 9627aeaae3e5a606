package gateway

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"
)

// peerClosed against a real TCP connection: open and idle, data waiting
// (not consumed), closed by the peer. (Data the peer sent before closing
// is read first, as the old watcher's one-byte read did: a hang-up behind
// pipelined data is seen once the data is read.)
func TestPeerClosed(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("peerClosed is Linux only")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	if peerClosed(server) {
		t.Error("an open idle connection reads as closed")
	}
	if _, err := client.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for peerClosed(server) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if peerClosed(server) {
		t.Error("a connection with data waiting reads as closed")
	}
	b := make([]byte, 4)
	if n, _ := io.ReadFull(server, b[:1]); n != 1 || b[0] != 'x' {
		t.Errorf("the peeked byte was consumed: read %d %q", n, b[:n])
	}
	client.Close()
	for !peerClosed(server) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if !peerClosed(server) {
		t.Error("a connection its peer closed does not read as closed within 5 s")
	}
	if peerClosed(nil) {
		t.Error("nil connection reads as closed")
	}
}

// A client that hangs up ends a buffered upstream call's retries: the
// upstream answers 503 after 100 ms per attempt, the gateway may retry 5
// times; the client leaves during the second attempt, so at most one more
// attempt starts after it left (6 attempts without the check).
func TestHangUpEndsUpstreamRetries(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		calls.Add(1)
		time.Sleep(100 * time.Millisecond)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	ts := upstreamFrontCfg(t, srv.URL+"/v1", 5, 10*time.Second, time.Minute)
	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	body := `{"model":"up-model","messages":[{"role":"user","content":"hi"}]}`
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	deadline := time.Now().Add(10 * time.Second)
	for calls.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	conn.Close()
	left := calls.Load()
	// Six attempts take ≥ 600 ms; wait past that, then until the count
	// stops moving.
	time.Sleep(900 * time.Millisecond)
	for n := calls.Load(); ; n = calls.Load() {
		time.Sleep(300 * time.Millisecond)
		if calls.Load() == n {
			break
		}
	}
	if got := calls.Load(); got > left+1 {
		t.Errorf("%d upstream attempts, %d of them after the client left: the hang-up did not end the retries", got, got-left)
	}
}

// cacheControl against the rule it replaced (split on commas, trim, lower
// case, compare) on directive lists with odd spacing, case and repeats.
func TestCacheControlDirectives(t *testing.T) {
	ref := func(h string) (nc, ns bool) {
		for _, d := range strings.Split(h, ",") {
			switch strings.ToLower(strings.TrimSpace(d)) {
			case "no-cache":
				nc = true
			case "no-store":
				ns = true
			}
		}
		return
	}
	app := fiber.New()
	for _, h := range []string{"", "no-cache", "No-Store", " no-cache , NO-STORE ", "max-age=0,no-cachex", ",,no-store,", "no-cache;x", "no-\tcache", "\tno-store\t", "no-ſtore", "private, no-cache"} {
		fc := app.AcquireCtx(&fasthttp.RequestCtx{})
		if h != "" {
			fc.Request().Header.Set(fiber.HeaderCacheControl, h)
		}
		nc, ns := cacheControl(fc)
		wc, ws := ref(h)
		if nc != wc || ns != ws {
			t.Errorf("Cache-Control %q: no-cache %v no-store %v, want %v %v", h, nc, ns, wc, ws)
		}
		app.ReleaseCtx(fc)
	}
}

// Request and completion ids: prefix and 24 hex digits, distinct.
func TestRandomIDs(t *testing.T) {
	seen := map[string]bool{}
	for _, p := range []string{"req_", "chatcmpl-", "cmpl-"} {
		for i := 0; i < 100; i++ {
			id := randomID(p)
			rest, ok := strings.CutPrefix(id, p)
			if !ok || len(rest) != 24 || strings.Trim(rest, "0123456789abcdef") != "" || seen[id] {
				t.Fatalf("id %q: want %q and 24 new hex digits", id, p)
			}
			seen[id] = true
		}
	}
}
