package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/specgate/specgate/cache"
	"github.com/specgate/specgate/gateway"
)

// TestBuildCacheHungRedis: the cache that serve builds over a Redis hung by
// SIGSTOP answers lookups as misses within a bound instead of stalling (the
// black-box test saw 4-15 s per cacheable request: go-redis ignored the
// context and waited its 3 s read timeout per call). It starts a
// redis-server of its own: SIGSTOP must not hit the shared one.
func TestBuildCacheHungRedis(t *testing.T) {
	if os.Getenv("SPECGATE_SKIP_REDIS") == "1" {
		t.Skip("SPECGATE_SKIP_REDIS=1")
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not installed (run .ci/redis.sh or set SPECGATE_SKIP_REDIS=1): %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, port, _ := net.SplitHostPort(addr)
	dir := t.TempDir()
	srv := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir,
		"--logfile", filepath.Join(dir, "redis.log"))
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = srv.Process.Signal(syscall.SIGCONT)
		_ = srv.Process.Kill()
		_ = srv.Wait()
	}()
	ping := redis.NewClient(&redis.Options{Addr: addr})
	for i := 0; ping.Ping(context.Background()).Err() != nil; i++ {
		if i > 100 {
			t.Fatal("private redis did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	ping.Close()

	cfg, err := gateway.ParseConfig([]byte(fmt.Sprintf("cache:\n  store: redis\n  index: redis\n  redis:\n    addr: %s\n", addr)))
	if err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	c, _, closeAll, err := gateway.OpenCache(cfg, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	ctx := context.Background()
	req := func(i int) *cache.Request {
		return &cache.Request{Tenant: "t", Model: "m", Messages: []cache.Message{{Role: "user", Content: fmt.Sprintf("question number %d about ephemeral things", i)}}}
	}
	if err := c.Put(ctx, req(0), []byte(`{"a":0}`), 1); err != nil {
		t.Fatal(err)
	}
	if err := srv.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var worst time.Duration
	gen := func(context.Context) ([]byte, float64, error) { return []byte(`{"a":1}`), 1, nil }
	for i := 1; i <= 20; i++ {
		start := time.Now()
		l, _, err := c.Do(ctx, req(i), gen)
		took := time.Since(start)
		if err != nil {
			t.Fatalf("request %d: %v (a hung cache must not fail the request)", i, err)
		}
		worst = max(worst, took)
		if l.Hit {
			t.Fatalf("lookup %d hit on a hung redis", i)
		}
		// Not a speed claim: a bound far above the 50 ms read timeout and
		// far below the unguarded 3 s.
		if took > time.Second {
			t.Errorf("lookup %d on the hung redis took %v", i, took)
		}
	}
	t.Logf("20 lookups on a hung redis: slowest %v", worst)
	// The breaker's opening is logged once; requests served while it is
	// open add no line each (before: two warnings per request).
	lines := strings.Count(logs.String(), "\n")
	t.Logf("log during the stall: %d lines\n%s", lines, logs.String())
	if n := strings.Count(logs.String(), "circuit breaker open"); n != 1 {
		t.Errorf("breaker opening logged %d times, want 1", n)
	}
	if lines > 10 {
		t.Errorf("%d log lines for 20 requests on a hung redis; want the first timeouts and the breaker's line only", lines)
	}
	if err := srv.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// The breaker probes again after its cooldown (1 s) and the cache hits.
	deadline := time.Now().Add(10 * time.Second)
	for {
		l, _ := c.Get(ctx, req(0))
		if l.Hit {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no hit 10 s after redis resumed")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
