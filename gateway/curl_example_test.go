package gateway

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// exampleCommand returns the shell block after "<!-- curl-example -->" in
// README.md, and checks that docs/api.md holds the very same block.
func exampleCommand(t *testing.T) string {
	t.Helper()
	re := regexp.MustCompile("(?s)<!-- curl-example -->\\s*```sh\\n(.*?)```")
	var blocks []string
	for _, path := range []string{"../README.md", "../docs/api.md"} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		m := re.FindSubmatch(b)
		if m == nil {
			t.Fatalf("%s has no curl-example block", path)
		}
		blocks = append(blocks, string(m[1]))
	}
	if blocks[0] != blocks[1] {
		t.Fatalf("README.md and docs/api.md curl examples differ:\n%s\n---\n%s", blocks[0], blocks[1])
	}
	return blocks[0]
}

// TestCurlExample runs the documented `curl -N` command as written against
// the gateway serving the shipped model on the address the command names.
func TestCurlExample(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl not installed")
	}
	cmdText := exampleCommand(t)
	if !strings.HasPrefix(cmdText, "curl -N ") {
		t.Fatalf("example does not start with curl -N: %q", cmdText)
	}
	addr := regexp.MustCompile(`http://([0-9.]+:[0-9]+)/`).FindStringSubmatch(cmdText)
	if addr == nil {
		t.Fatalf("no address in %q", cmdText)
	}
	ln, err := net.Listen("tcp", addr[1])
	if err != nil {
		// Another process holds the documented port: run the same command
		// against a free port instead, changing nothing else.
		t.Logf("%s busy (%v); substituting a free port", addr[1], err)
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		cmdText = strings.ReplaceAll(cmdText, addr[1], ln.Addr().String())
	}
	// With a cache, as `specgate serve` has by default.
	s, err := New(Options{Config: DefaultConfig(), Models: []*LocalModel{shippedModel(t)}, Cache: newTestCache(t), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(ln) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "bash", "-c", cmdText).Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", cmdText, err, out)
	}
	events := strings.Split(strings.TrimSuffix(string(out), "\n\n"), "\n\n")
	if len(events) < 3 || events[len(events)-1] != "data: [DONE]" {
		t.Fatalf("output is not an SSE stream ending in [DONE]:\n%s", out)
	}
	var text strings.Builder
	for _, ev := range events[:len(events)-1] {
		data, ok := strings.CutPrefix(ev, "data: ")
		if !ok {
			t.Fatalf("event without data: %q", ev)
		}
		var c ChatCompletionChunk
		if err := json.Unmarshal([]byte(data), &c); err != nil || c.Object != "chat.completion.chunk" {
			t.Fatalf("bad chunk %q: %v", data, err)
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != nil {
				text.WriteString(*ch.Delta.Content)
			}
		}
	}
	if text.Len() == 0 {
		t.Fatalf("no content streamed:\n%s", out)
	}
	t.Logf("streamed %d events: %q", len(events), text.String())

	// The README says: ask again (with -i to see the headers) and the
	// answer comes from the cache.
	again, err := exec.CommandContext(ctx, "bash", "-c", strings.Replace(cmdText, "curl -N ", "curl -N -i ", 1)).Output()
	if err != nil {
		t.Fatalf("second call: %v\n%s", err, again)
	}
	head, body, _ := strings.Cut(strings.ReplaceAll(string(again), "\r\n", "\n"), "\n\n")
	if !regexp.MustCompile(`(?mi)^X-Cache: HIT-EXACT$`).MatchString(head) {
		t.Fatalf("second call is not a cache hit:\n%s", head)
	}
	if !strings.Contains(body, "data: [DONE]") {
		t.Fatalf("second call did not end with [DONE]:\n%s", body)
	}
	var replay strings.Builder
	for _, ev := range strings.Split(strings.TrimSuffix(body, "\n\n"), "\n\n") {
		data, _ := strings.CutPrefix(ev, "data: ")
		var c ChatCompletionChunk
		if json.Unmarshal([]byte(data), &c) == nil {
			for _, ch := range c.Choices {
				if ch.Delta.Content != nil {
					replay.WriteString(*ch.Delta.Content)
				}
			}
		}
	}
	if replay.String() != text.String() {
		t.Errorf("cached replay %q != first answer %q", replay.String(), text.String())
	}
}
