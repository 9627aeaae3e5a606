package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" && binErr == nil {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// specgateBinary builds the command once per test run (go build: the real
// binary, as a user runs it).
func specgateBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "specgate-cli-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "specgate")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = err
			binPath = string(out)
		}
	})
	if binErr != nil {
		t.Fatalf("go build: %v\n%s", binErr, binPath)
	}
	return binPath
}

// TestHelpExitsZero: `specgate --help`, `specgate help`, `specgate help
// serve`, `specgate version` and `specgate CMD --help` for every registered
// command exit 0 and print something.
func TestHelpExitsZero(t *testing.T) {
	bin := specgateBinary(t)
	runs := [][]string{{"--help"}, {"-h"}, {"help"}, {"help", "serve"}, {"version"}, {"--version"}, {"version", "--json"}, {"bench", "--help"}}
	for name := range commands {
		words := []string{name}
		if rest, ok := strings.CutPrefix(name, "bench-"); ok {
			words = []string{"bench", rest}
		} else if name == "cache-bench" {
			words = []string{"bench", "cache"}
		}
		runs = append(runs, append(words, "--help"))
	}
	for _, args := range runs {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
		cancel()
		if err != nil || len(out) == 0 {
			t.Errorf("specgate %s: %v, output %q", strings.Join(args, " "), err, out)
		}
	}
	if out, err := exec.Command(bin, "frobnicate").CombinedOutput(); err == nil {
		t.Errorf("unknown command exited 0: %s", out)
	} else if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
		t.Errorf("unknown command: %v, want exit status 2", err)
	}
	out, _ := exec.Command(bin, "version").Output()
	if !regexp.MustCompile(`^specgate \S+ .*go1\.\d+`).Match(out) {
		t.Errorf("version: %q", out)
	}
}

// startServe runs the binary with args in dir and waits for its
// announcement; it returns the base URL and the announcement text.
func startServe(t *testing.T, dir string, args ...string) (string, string) {
	t.Helper()
	bin := specgateBinary(t)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "SPECGATE_DATA_DIR="+t.TempDir())
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var text strings.Builder
	base := ""
	re := regexp.MustCompile(`dashboard\s+(http://\S+)/$`)
	timeout := time.After(60 * time.Second)
	for base == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("specgate %v exited before listening:\n%s", args, text.String())
			}
			text.WriteString(l + "\n")
			if m := re.FindStringSubmatch(l); m != nil {
				base = m[1]
			}
		case <-timeout:
			t.Fatalf("specgate %v: no dashboard URL within 60s:\n%s", args, text.String())
		}
	}
	go func() {
		for range lines {
		}
	}()
	return base, text.String()
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	r, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	if r.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", url, r.StatusCode, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %v in %s", url, err, b)
	}
}

func chatOnce(t *testing.T, base, model string) string {
	t.Helper()
	r, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(
		`{"model":"`+model+`","max_tokens":8,"temperature":0,"messages":[{"role":"user","content":"Define ocean."}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	var resp struct {
		Model   string `json:"model"`
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
	}
	b, _ := io.ReadAll(r.Body)
	if r.StatusCode != 200 || json.Unmarshal(b, &resp) != nil || len(resp.Choices) != 1 || resp.Model != model {
		t.Fatalf("chat with %s: %d %s", model, r.StatusCode, b)
	}
	return resp.Choices[0].Message.Content
}

func modelIDs(t *testing.T, base string) []string {
	var list struct {
		Data []struct{ ID string } `json:"data"`
	}
	getJSON(t, base+"/v1/models", &list)
	var ids []string
	for _, m := range list.Data {
		ids = append(ids, m.ID)
	}
	return ids
}

// TestServeCommandLine runs the built binary as a user would:
// `serve models/specgate-draft --addr ...` (positional directory, flags
// after it) from the repository root serves the draft; `--model ABS` from a
// directory under /tmp serves; with no model at all from /tmp the binary
// finds the shipped model in its source tree. Each prints the API and
// dashboard URLs, and answers /health, /version and a chat completion.
func TestServeCommandLine(t *testing.T) {
	root, _ := filepath.Abs("../..")
	target := filepath.Join(root, "models", "specgate-target")
	if _, err := os.Stat(filepath.Join(target, "config.json")); err != nil {
		t.Skipf("shipped model not present: %v", err)
	}
	tmp := t.TempDir() // under /tmp (os.TempDir)
	cases := []struct {
		name, dir string
		args      []string
		model     string
	}{
		{"positional draft from the repo root", root, []string{"serve", "models/specgate-draft", "--addr", "127.0.0.1:0"}, "specgate-draft"},
		{"--model from /tmp", tmp, []string{"serve", "--addr", "127.0.0.1:0", "--model", target, "--backend", "cpu"}, "specgate-target"},
		{"no model from /tmp (shipped default)", tmp, []string{"--addr", "127.0.0.1:0"}, "specgate-target"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			base, text := startServe(t, c.dir, c.args...)
			for _, w := range []string{"loading " + c.model, "OpenAI API  " + base + "/v1", "dashboard   " + base + "/"} {
				if !strings.Contains(text, w) {
					t.Errorf("startup output lacks %q:\n%s", w, text)
				}
			}
			if ids := modelIDs(t, base); len(ids) == 0 || !contains(ids, c.model) {
				t.Errorf("/v1/models = %v, want %s", ids, c.model)
			}
			var h map[string]any
			getJSON(t, base+"/health", &h)
			if h["status"] != "ok" {
				t.Errorf("/health = %v", h)
			}
			var v map[string]any
			getJSON(t, base+"/version", &v)
			if s, _ := v["go_version"].(string); !strings.HasPrefix(s, "go1.") || v["version"] == "" {
				t.Errorf("/version = %v", v)
			}
			chatOnce(t, base, c.model)
		})
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// TestServeFlags checks the argument rules without starting a server.
func TestServeFlags(t *testing.T) {
	f, err := parseServeFlags([]string{"models/x", "--addr", ":9000", "--draft", "d"})
	if err != nil || f.model != "models/x" || f.addr != ":9000" || f.draft != "d" {
		t.Errorf("flags after MODEL_DIR: %+v %v", f, err)
	}
	for _, bad := range [][]string{{"a", "b"}, {"a", "--model", "b"}, {"--draft", "d", "--medusa", "m", "x"}, {"--backend", "cpu"}} {
		if _, err := parseServeFlags(bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
