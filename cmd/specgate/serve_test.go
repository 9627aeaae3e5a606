package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServeSIGTERM runs `specgate serve` in process with a config file,
// streams a completion, sends SIGTERM mid-stream and checks that the stream
// still finishes, the server stops accepting and serve returns cleanly.
func TestServeSIGTERM(t *testing.T) {
	model, _ := filepath.Abs("../../models/specgate-target")
	if _, err := os.Stat(filepath.Join(model, "config.json")); err != nil {
		t.Skipf("shipped model not present: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "specgate.yaml")
	yaml := fmt.Sprintf("server:\n  data_dir: %s\n  shutdown_timeout: 20s\n  log_level: warn\nmodels:\n  - name: specgate-target\n    path: %s\n    backend: cpu\n", filepath.Join(dir, "data"), model)
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- runServe([]string{"--config", cfg, "--addr", addr}) }()
	base := "http://" + addr
	deadline := time.Now().Add(60 * time.Second)
	for {
		r, err := http.Get(base + "/readyz")
		if err == nil && r.StatusCode == 200 {
			r.Body.Close()
			break
		}
		select {
		case err := <-done:
			t.Fatalf("serve exited early: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("server never became ready")
		}
		time.Sleep(50 * time.Millisecond)
	}
	resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(
		`{"model":"specgate-target","stream":true,"temperature":0,"max_tokens":48,"messages":[{"role":"user","content":"What does ephemeral mean?"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	first := make([]byte, 6)
	if _, err := io.ReadFull(resp.Body, first); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Errorf("in-flight stream cut by SIGTERM: err=%v tail=%q", err, string(rest[max(0, len(rest)-80):]))
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve returned %v after SIGTERM", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve still running 30s after SIGTERM")
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Error("server still accepting after shutdown")
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "cache.db")); err != nil {
		t.Errorf("default SQLite cache not created in data_dir: %v", err)
	}
}
