package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/specgate/specgate/cache"
	"github.com/specgate/specgate/gateway"
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

// TestBuildCacheRedis wires the cache section with Redis as store and index
// (needs a Redis: .ci/redis.sh starts one) and checks that an entry written
// through one cache is served by a second one built from the same config,
// as two gateway replicas would.
func TestBuildCacheRedis(t *testing.T) {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err != nil {
		t.Skipf("no Redis at %s: %v", addr, err)
	} else {
		c.Close()
	}
	cfg, err := gateway.ParseConfig([]byte(fmt.Sprintf("cache:\n  store: redis\n  index: redis\n  redis:\n    addr: %s\n", addr)))
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	tenant := fmt.Sprintf("serve-test-%d", time.Now().UnixNano())
	req := &cache.Request{Tenant: tenant, Model: "m", Messages: []cache.Message{{Role: "user", Content: "what does ephemeral mean"}}}
	reg1 := prometheus.NewRegistry()
	c1, _, close1, err := gateway.OpenCache(cfg, reg1, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := c1.Put(context.Background(), req, []byte(`{"answer":1}`), 3); err != nil {
		t.Fatal(err)
	}
	close1()
	c2, _, close2, err := gateway.OpenCache(cfg, prometheus.NewRegistry(), log)
	if err != nil {
		t.Fatal(err)
	}
	defer close2()
	l, err := c2.Get(context.Background(), req)
	if err != nil || !l.Hit || string(l.Response) != `{"answer":1}` {
		t.Fatalf("second replica: %+v, %v", l, err)
	}
	para := *req
	para.Messages = []cache.Message{{Role: "user", Content: "What does ephemeral mean?"}}
	if l, err := c2.Get(context.Background(), &para); err != nil || !l.Hit {
		t.Errorf("paraphrase on second replica: %+v, %v", l, err)
	}
	fams, _ := reg1.Gather()
	found := false
	for _, f := range fams {
		found = found || f.GetName() == "specgate_cache_stores_total"
	}
	if !found {
		t.Error("cache collectors not registered on the serve registry")
	}
}
