package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/specgate/specgate/cache"
)

// privateRedis starts a redis-server of its own on a free loopback port (the
// test stops it with SIGSTOP, which must not hit the shared one) and
// returns its address and process.
func privateRedis(t *testing.T) (string, *os.Process) {
	t.Helper()
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
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	dir := t.TempDir()
	cmd := exec.Command(bin, "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", filepath.Join(dir, "redis.log"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	for i := 0; ; i++ {
		if rdb.Ping(context.Background()).Err() == nil {
			return addr, cmd.Process
		}
		if i > 100 {
			t.Fatalf("private redis on %s did not start", addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A Redis hung by SIGSTOP: calls through the breaker return a timeout
// within their bound instead of hanging for seconds, the breaker opens and
// refuses calls without touching Redis, and after SIGCONT a probe closes
// it again. Before, a Get on the hung Redis blocked for go-redis's 3 s read
// timeout (and every cacheable request with it).
func TestBreakerHungRedis(t *testing.T) {
	addr, proc := privateRedis(t)
	rdb := redis.NewClient(ClientOptions(addr, "", 0))
	defer rdb.Close()
	st, err := New(rdb, Options{Prefix: "guardtest"})
	if err != nil {
		t.Fatal(err)
	}
	var changes []bool
	b := NewBreaker(GuardOptions{ReadTimeout: 50 * time.Millisecond, Failures: 3, Cooldown: 200 * time.Millisecond,
		OnChange: func(open bool) { changes = append(changes, open) }})
	gs := b.Store(st)
	ctx := context.Background()
	e := &cache.Entry{ID: "a", Namespace: "ns", Key: "k", Response: []byte("r"), CreatedAt: time.Now()}
	if err := gs.Put(ctx, e); err != nil {
		t.Fatal(err)
	}
	if _, err := gs.Get(ctx, "ns", "a"); err != nil {
		t.Fatal(err)
	}

	if err := proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		start := time.Now()
		_, err := gs.Get(ctx, "ns", "a")
		took := time.Since(start)
		t.Logf("Get %d on the hung redis: %v after %v", i, err, took)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Get %d: %v, want a timeout", i, err)
		}
		// Not a speed claim: a bound 20x the timeout that the unguarded
		// client (3 s read timeout) cannot meet.
		if took > time.Second {
			t.Errorf("Get %d took %v with a 50ms timeout", i, took)
		}
	}
	if !b.Open() {
		t.Fatal("breaker still closed after 3 timeouts")
	}
	if _, err := gs.Get(ctx, "ns", "a"); !errors.Is(err, ErrOpen) {
		t.Fatalf("Get with the breaker open: %v, want ErrOpen", err)
	}
	if err := gs.Put(ctx, e); !errors.Is(err, ErrOpen) {
		t.Fatalf("Put with the breaker open: %v, want ErrOpen", err)
	}
	// A probe after the cooldown fails while Redis is still stopped.
	time.Sleep(250 * time.Millisecond)
	if _, err := gs.Get(ctx, "ns", "a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("probe on the hung redis: %v, want a timeout", err)
	}
	if _, err := gs.Get(ctx, "ns", "a"); !errors.Is(err, ErrOpen) {
		t.Fatalf("after a failed probe: %v, want ErrOpen", err)
	}

	if err := proc.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// Probes after the cooldown close the breaker once one answers in time
	// (on a loaded machine the first probe after SIGCONT may still miss the
	// 50 ms timeout while Redis drains its queue: the breaker then waits
	// another cooldown, as in production).
	var got *cache.Entry
	for deadline := time.Now().Add(10 * time.Second); ; {
		time.Sleep(250 * time.Millisecond)
		got, err = gs.Get(ctx, "ns", "a")
		if err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || string(got.Response) != "r" {
		t.Fatalf("probe after SIGCONT: %v %v", got, err)
	}
	if b.Open() {
		t.Fatal("breaker still open after a successful probe")
	}
	if len(changes) != 2 || !changes[0] || changes[1] {
		t.Errorf("breaker changes = %v, want [open closed]", changes)
	}
	// Not-found is no failure.
	for i := 0; i < 5; i++ {
		if _, err := gs.Get(ctx, "ns", "missing"); !errors.Is(err, cache.ErrNotFound) {
			t.Fatal(err)
		}
	}
	if b.Open() {
		t.Fatal("not-found answers opened the breaker")
	}
}

// The index goes through the same breaker.
func TestBreakerIndex(t *testing.T) {
	addr, proc := privateRedis(t)
	rdb := redis.NewClient(ClientOptions(addr, "", 0))
	defer rdb.Close()
	ix, err := NewIndex(rdb, IndexOptions{Prefix: "guardtest", Dim: 2})
	if err != nil {
		t.Fatal(err)
	}
	b := NewBreaker(GuardOptions{Failures: 2, Cooldown: time.Hour})
	gi := b.Index(ix)
	ctx := context.Background()
	if err := gi.Add(ctx, "ns", "a", []float32{1, 0}); err != nil {
		t.Fatal(err)
	}
	if ms, err := gi.Search(ctx, "ns", []float32{1, 0}, 1); err != nil || len(ms) != 1 || ms[0].ID != "a" {
		t.Fatalf("search: %v %v", ms, err)
	}
	if err := proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Another namespace, so that the index has to ask Redis.
	for i := 0; i < 2; i++ {
		if _, err := gi.Search(ctx, fmt.Sprint("other", i), []float32{1, 0}, 1); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("search on the hung redis: %v, want a timeout", err)
		}
	}
	if _, err := gi.Search(ctx, "ns", []float32{1, 0}, 1); !errors.Is(err, ErrOpen) {
		t.Fatalf("search with the breaker open: %v, want ErrOpen", err)
	}
}
