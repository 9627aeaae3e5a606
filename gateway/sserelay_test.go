package gateway

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// shortLines is an upstream body of n bytes of short data lines with no
// blank line between them (one event that never ends), then a blank line
// and [DONE].
func shortLines(n int) io.Reader {
	line := []byte("data: {\"x\":1}\n")
	return io.MultiReader(bytes.NewReader(bytes.Repeat(line, n/len(line))), strings.NewReader("\ndata: [DONE]\n\n"))
}

// An event made of many short lines is bounded like one long line (before:
// only a line overflowing the 64 KiB reader was checked, so 32 MiB of short
// lines were relayed as one event with err=nil).
func TestRelaySSEShortLinesBounded(t *testing.T) {
	var out bytes.Buffer
	w := bufio.NewWriter(&out)
	r := relaySSE(w, shortLines(32<<20), nil)
	t.Logf("err=%v done=%v events=%d relayed=%d bytes", r.err, r.done, r.events, out.Len())
	if r.err == nil || !strings.Contains(r.err.Error(), "exceeds") {
		t.Fatalf("err = %v; want the event size error", r.err)
	}
	if out.Len() != 0 || r.done {
		t.Fatalf("relayed %d bytes, done=%v; want nothing of the oversize event", out.Len(), r.done)
	}
	// An event just under the bound still passes.
	out.Reset()
	r = relaySSE(w, shortLines(maxSSEEvent-64), nil)
	if r.err != nil || !r.done || out.Len() < maxSSEEvent-128 {
		t.Fatalf("under the bound: err=%v done=%v relayed=%d", r.err, r.done, out.Len())
	}
}

// End to end: an upstream that streams short data lines without ever ending
// the event gets the client an error event naming the bound, then [DONE],
// instead of the gateway buffering until memory runs out.
func TestUpstreamStreamOversizeEventShortLines(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, firstEvent+"\n\n")
		w.(http.Flusher).Flush()
		// 24 MiB, or until the gateway hangs up.
		_, _ = io.Copy(w, shortLines(24<<20))
	}))
	defer srv.Close()
	ts := upstreamFrontCfg(t, srv.URL+"/v1", 0, 0, 0)
	r := post(t, ts.URL+"/v1/chat/completions", "", `{"model":"up-model","stream":true,"messages":[]}`, nil)
	if r.status != 200 {
		t.Fatalf("status %d", r.status)
	}
	if len(r.body) > 1<<20 {
		t.Fatalf("client got %d bytes; want the first event, an error event and [DONE]", len(r.body))
	}
	checkBrokenStream(t, r.body, firstEvent, "upstream_error")
	if !bytes.Contains(r.body, []byte("exceeds")) {
		t.Fatalf("error event does not name the bound: %q", r.body)
	}
}
