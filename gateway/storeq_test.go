package gateway

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/specgate/specgate/cache"
)

// gatedPutCache is a ResponseCache whose Put blocks until the test
// releases it (a slow disk, a Redis far away), then writes to the real
// cache underneath. It has no GetPending, so the gateway calls Put.
type gatedPutCache struct {
	ResponseCache
	entered chan struct{} // one value per Put entered
	release chan struct{} // closed by the test
	done    atomic.Int32  // Puts that returned
}

func newGatedPutCache(inner ResponseCache) *gatedPutCache {
	return &gatedPutCache{ResponseCache: inner, entered: make(chan struct{}, 16), release: make(chan struct{})}
}

func (c *gatedPutCache) Put(ctx context.Context, req *cache.Request, response []byte, cost float64) error {
	c.entered <- struct{}{}
	<-c.release
	defer c.done.Add(1)
	return c.ResponseCache.Put(ctx, req, response, cost)
}

// waitFor waits for ch; hang bounds how long a broken gateway may keep the
// test waiting (a bound on a hang, not a timing assertion).
const hang = 10 * time.Second

func waitFor[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(hang):
		t.Fatalf("%s: nothing after %v", what, hang)
		panic("unreachable")
	}
}

// The client has its whole response (a JSON body; a stream read to its
// end, [DONE] and the closing chunk) while the cache write of its answer
// is still blocked; an identical request sent then is a cache hit served
// from the queued answer, and after the write committed, from the cache.
func TestResponseDoesNotWaitForCacheWrite(t *testing.T) {
	for _, stream := range []bool{false, true} {
		name := "json"
		if stream {
			name = "stream"
		}
		t.Run(name, func(t *testing.T) {
			g := &fakeGen{Reply: "stored answer"}
			gc := newGatedPutCache(newTestCache(t))
			released := false
			defer func() {
				if !released {
					close(gc.release)
				}
			}()
			ts := startServer(t, Options{Models: []*LocalModel{fakeModel("m", g)}, Cache: gc})
			body := `{"model":"m","stream":` + map[bool]string{false: "false", true: "true"}[stream] +
				`,"temperature":0,"messages":[{"role":"user","content":"what is stored?"}]}`
			replies := make(chan cacheReply, 1)
			go func() { replies <- post(t, ts.URL+"/v1/chat/completions", "", body, nil) }()
			waitFor(t, gc.entered, "the answer's cache write")
			r := waitFor(t, replies, "the response while its cache write is blocked")
			if r.status != 200 || r.xcache != cache.Miss {
				t.Fatalf("first request: %d %s %s", r.status, r.xcache, r.body)
			}
			content := func(r cacheReply) string {
				if stream {
					return sseContent(t, r.body)
				}
				c, _ := chatContent(t, r.body)
				return c
			}
			if got := content(r); got != "stored answer" {
				t.Fatalf("first answer %q", got)
			}
			if gc.done.Load() != 0 {
				t.Fatal("the write finished before the test released it")
			}

			// The write is still blocked: an identical request is answered
			// from the queued answer, not generated again.
			r2 := post(t, ts.URL+"/v1/chat/completions", "", body, nil)
			if r2.status != 200 || r2.xcache != cache.HitExact || r2.similarity != "1.0000" {
				t.Fatalf("repeat while the write is queued: %d X-Cache %q similarity %q %s", r2.status, r2.xcache, r2.similarity, r2.body)
			}
			if got := content(r2); got != "stored answer" {
				t.Fatalf("repeat answer %q", got)
			}
			if !stream {
				if _, u := chatContent(t, r2.body); u == nil || u.PromptTokensDetails == nil || u.PromptTokensDetails.CachedTokens != u.PromptTokens {
					t.Errorf("repeat's usage %+v: a hit counts every prompt token as cached", u)
				}
			}
			if n := g.calls.Load(); n != 1 {
				t.Fatalf("generations = %d, want 1", n)
			}
			if v := metricValue(t, ts.URL, `specgate_cache_pending_hits_total`); v != 1 {
				t.Errorf("pending hits = %v, want 1", v)
			}

			close(gc.release)
			released = true
			if !ts.stores.drain(hang, false) {
				t.Fatal("the write did not finish after release")
			}
			if gc.done.Load() != 1 {
				t.Fatalf("writes done = %d, want 1", gc.done.Load())
			}
			r3 := post(t, ts.URL+"/v1/chat/completions", "", body, nil)
			if r3.xcache != cache.HitExact || content(r3) != "stored answer" || g.calls.Load() != 1 {
				t.Fatalf("after the write: X-Cache %q, %d generations", r3.xcache, g.calls.Load())
			}
			if v := metricValue(t, ts.URL, `specgate_cache_pending_hits_total`); v != 1 {
				t.Errorf("pending hits = %v, want 1 (the third request hit the cache itself)", v)
			}
			if v := metricValue(t, ts.URL, `specgate_cache_writes_total{mode="background",result="ok"}`); v != 1 {
				t.Errorf("background writes ok = %v, want 1", v)
			}
		})
	}
}

// With the real cache (SQLite, no gate), an identical request sent right after the
// response arrived is a hit, whether the write committed by then or not,
// JSON and streams.
func TestCacheWriteVisibleToNextRequest(t *testing.T) {
	g := &fakeGen{Reply: "visible"}
	cfg := cache.DefaultConfig()
	cfg.DisableSemantic = true // the keys differ by a letter: exact hits only
	c, err := cache.OpenDefault(filepath.Join(t.TempDir(), "cache.db"), cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ts := startServer(t, Options{Models: []*LocalModel{fakeModel("m", g)}, Cache: c})
	for i := 0; i < 20; i++ {
		for _, stream := range []string{"false", "true"} {
			body := `{"model":"m","stream":` + stream + `,"temperature":0,"messages":[{"role":"user","content":"question ` + stream + strings.Repeat("x", i) + `"}]}`
			if r := post(t, ts.URL+"/v1/chat/completions", "", body, nil); r.status != 200 || r.xcache != cache.Miss {
				t.Fatalf("%d %s: first %d %s", i, stream, r.status, r.xcache)
			}
			if r := post(t, ts.URL+"/v1/chat/completions", "", body, nil); r.status != 200 || r.xcache != cache.HitExact {
				t.Fatalf("%d %s: repeat X-Cache %q, want %s", i, stream, r.xcache, cache.HitExact)
			}
		}
	}
	if n := g.calls.Load(); n != 40 {
		t.Errorf("generations = %d, want 40", n)
	}
}

// The store queue's read-your-writes bookkeeping: a lookup that missed
// while the key's write committed is told to look up again.
func TestStoreQueueRetryAfterCommit(t *testing.T) {
	s := &Server{log: slog.New(slog.DiscardHandler)}
	s.met = &metrics{store: newStoreMetrics()}
	s.stores.s = s
	put := make(chan struct{})
	var wrote sync.WaitGroup
	wrote.Add(1)
	mark := s.stores.mark()
	s.stores.enqueue(&storeJob{key: "ns\x00a", body: []byte("A"), put: func(context.Context, []byte, float64) error {
		<-put
		wrote.Done()
		return nil
	}})
	if b, retry := s.stores.answer("ns\x00a", mark); string(b) != "A" || retry {
		t.Fatalf("queued: %q %v", b, retry)
	}
	if b, retry := s.stores.answer("ns\x00b", mark); b != nil || retry {
		t.Fatalf("other key: %q %v", b, retry)
	}
	close(put)
	if !s.stores.drain(hang, false) {
		t.Fatal("no drain")
	}
	if b, retry := s.stores.answer("ns\x00a", mark); b != nil || !retry {
		t.Fatalf("committed since mark: %q retry %v, want retry", b, retry)
	}
	if b, retry := s.stores.answer("ns\x00a", s.stores.mark()); b != nil || retry {
		t.Fatalf("committed before mark: %q retry %v", b, retry)
	}
	// More completions than remembered: retry, to be safe.
	mark = s.stores.mark()
	for i := 0; i < storeQueueRecent+1; i++ {
		s.stores.enqueue(&storeJob{key: "ns\x00" + strings.Repeat("z", i+1), put: func(context.Context, []byte, float64) error { return nil }})
	}
	s.stores.drain(hang, false)
	if _, retry := s.stores.answer("ns\x00unrelated", mark); !retry {
		t.Error("after more writes than remembered: want retry")
	}
}

// Shutdown waits for queued cache writes, and what it waited for is in the
// SQLite file afterwards.
func TestShutdownDrainsCacheWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache.db")
	open := func() *cache.Default {
		c, err := cache.OpenDefault(path, cache.DefaultConfig(), 0)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := open()
	gc := newGatedPutCache(c)
	ts := startServer(t, Options{Models: []*LocalModel{fakeModel("m", &fakeGen{Reply: "durable"})}, Cache: gc})
	body := `{"model":"m","temperature":0,"messages":[{"role":"user","content":"keep me"}]}`
	replies := make(chan cacheReply, 1)
	go func() { replies <- post(t, ts.URL+"/v1/chat/completions", "", body, nil) }()
	waitFor(t, gc.entered, "the cache write")
	if r := waitFor(t, replies, "the response"); r.status != 200 {
		t.Fatal(r.status)
	}
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), hang)
		defer cancel()
		stopped <- ts.Shutdown(ctx)
	}()
	// Wait until Shutdown reached the queue (it closes it), then check it
	// has not returned while the write is still blocked.
	for {
		ts.stores.mu.Lock()
		closed := ts.stores.closed
		ts.stores.mu.Unlock()
		if closed {
			break
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case err := <-stopped:
		t.Fatalf("Shutdown returned (%v) with a cache write still queued", err)
	default:
	}
	close(gc.release)
	if err := waitFor(t, stopped, "Shutdown"); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if gc.done.Load() != 1 {
		t.Fatalf("writes done at Shutdown's return = %d, want 1", gc.done.Load())
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c2 := open()
	defer c2.Close()
	var answers []string
	if err := c2.Store.Scan(context.Background(), "", func(e *cache.Entry) error {
		answers = append(answers, string(e.Response))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(answers) != 1 || !strings.Contains(answers[0], `"content":"durable"`) {
		t.Fatalf("entries in the reopened SQLite file: %q, want the one answer", answers)
	}
}

// A failing cache write is logged and counted; the client got its answer.
func TestFailingCacheWriteCounted(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	lw := writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return logs.Write(p) })
	ts := startServer(t, Options{Models: []*LocalModel{fakeModel("m", &fakeGen{Reply: "x"})}, Cache: failPutCache{newTestCache(t)},
		Logger: slog.New(slog.NewTextHandler(lw, nil))})
	for i := 0; i < 2; i++ {
		if r := post(t, ts.URL+"/v1/chat/completions", "", `{"model":"m","temperature":0,"messages":[{"role":"user","content":"q`+strings.Repeat("?", i)+`"}]}`, nil); r.status != 200 {
			t.Fatal(r.status)
		}
	}
	if !ts.stores.drain(hang, false) {
		t.Fatal("no drain")
	}
	if v := metricValue(t, ts.URL, `specgate_cache_writes_total{mode="background",result="error"}`); v != 2 {
		t.Errorf("failed writes counted = %v, want 2", v)
	}
	if v := metricValue(t, ts.URL, `specgate_cache_writes_total{mode="background",result="ok"}`); v != 0 {
		t.Errorf("ok writes = %v, want 0", v)
	}
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(logs.String(), "cache store failed"); n != 2 || !strings.Contains(logs.String(), "disk full") {
		t.Errorf("log has %d 'cache store failed' lines:\n%s", n, logs.String())
	}
}

type failPutCache struct{ ResponseCache }

func (failPutCache) Put(context.Context, *cache.Request, []byte, float64) error {
	return errors.New("disk full")
}

// A queue that never empties keeps its slice bounded (the consumed prefix
// is dropped), and a write to a full queue runs inline.
func TestStoreQueueBounded(t *testing.T) {
	s := &Server{log: slog.New(slog.DiscardHandler)}
	s.met = &metrics{store: newStoreMetrics()}
	s.stores.s = s
	tokens := make(chan struct{})
	blocked := func(context.Context, []byte, float64) error { <-tokens; return nil }
	queued := func() int {
		s.stores.mu.Lock()
		defer s.stores.mu.Unlock()
		return len(s.stores.jobs) - s.stores.head
	}
	// Fill: the two workers take one job each and block, the rest queue.
	for i := 0; i < storeQueueWorkers; i++ {
		s.stores.enqueue(&storeJob{put: blocked})
	}
	for queued() != 0 {
		time.Sleep(time.Millisecond)
	}
	for i := 0; i < storeQueueMaxJobs; i++ {
		s.stores.enqueue(&storeJob{put: blocked})
	}
	ran := false
	s.stores.enqueue(&storeJob{put: func(context.Context, []byte, float64) error { ran = true; return nil }})
	if !ran {
		t.Fatal("a write to a full queue did not run inline")
	}
	// One write finishes, one more is queued, many times over: the queue
	// never empties.
	for i := 0; i < 4*storeQueueMaxJobs; i++ {
		tokens <- struct{}{}
		for queued() == storeQueueMaxJobs {
			runtime.Gosched()
		}
		s.stores.enqueue(&storeJob{put: blocked})
		s.stores.mu.Lock()
		n, c := len(s.stores.jobs)-s.stores.head, cap(s.stores.jobs)
		s.stores.mu.Unlock()
		if n == 0 {
			t.Fatal("the queue emptied")
		}
		if c > 4*storeQueueMaxJobs {
			t.Fatalf("queue slice capacity %d with at most %d queued", c, storeQueueMaxJobs)
		}
	}
	close(tokens)
	if !s.stores.drain(hang, true) {
		t.Fatal("no drain")
	}
}
