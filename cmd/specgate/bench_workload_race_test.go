package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/specgate/specgate/engine"
)

// wlSleepGen is a Generator that emits one chunk, then takes a little
// time before it returns (as the engine does after the last token: it
// frees the request's KV).
type wlSleepGen struct{ before, after time.Duration }

func (g wlSleepGen) Generate(ctx context.Context, req engine.GenerateRequest, emit func(engine.Chunk) error) (engine.Result, error) {
	time.Sleep(g.before)
	if err := emit(engine.Chunk{Text: "x"}); err != nil {
		return engine.Result{}, err
	}
	time.Sleep(g.after)
	return engine.Result{}, nil
}

// TestWorkloadTimedGenRace: the in-process server's goroutine writes
// wlTimedGen's enter/exit while wlPost, on the client's goroutine, reads
// them to split a request's wall time. Two servers: one answers after
// Generate returned (the gateway's non-streamed path: the split must be
// recorded and add up), one answers from inside Generate (a streamed
// answer's last bytes leave before Generate returns), where the client
// reads while the server writes: run under -race, the plain time.Time
// fields raced there; the split must be skipped or consistent, never
// built from another request's exit.
func TestWorkloadTimedGenRace(t *testing.T) {
	oldGen, oldProbe := wlGen, wlProbe
	defer func() { wlGen, wlProbe = oldGen, oldProbe }()
	wlProbe = func() wlBreakdown { return wlBreakdown{} }
	body, _ := json.Marshal(map[string]any{"choices": []map[string]any{{"text": "x"}}})
	reply := func(w http.ResponseWriter) { // sized: the client has the whole answer once these bytes arrive
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body)
	}
	after := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := wlGen.Generate(r.Context(), engine.GenerateRequest{}, func(engine.Chunk) error { return nil }); err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		reply(w)
	}))
	defer after.Close()
	inside := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = wlGen.Generate(r.Context(), engine.GenerateRequest{}, func(engine.Chunk) error {
			reply(w)
			w.(http.Flusher).Flush()
			return nil
		})
	}))
	defer inside.Close()
	req := wlRequest{path: "/v1/completions", body: map[string]any{"prompt": "p"}}

	wlGen = &wlTimedGen{g: wlSleepGen{before: 2 * time.Millisecond}}
	for range 5 {
		rep, err := wlPost(context.Background(), after.URL, "", req, nil)
		if err != nil {
			t.Fatal(err)
		}
		if rep.bd.gen < 2*time.Millisecond || rep.bd.pre <= 0 || rep.bd.post <= 0 || rep.bd.pre+rep.bd.gen+rep.bd.post != rep.dur {
			t.Fatalf("answered after Generate: pre %v + gen %v + post %v, wall %v: want the Generate span (>= 2 ms) inside the wall time, adding up",
				rep.bd.pre, rep.bd.gen, rep.bd.post, rep.dur)
		}
	}
	wlGen = &wlTimedGen{g: wlSleepGen{after: time.Millisecond}}
	for range 20 {
		rep, err := wlPost(context.Background(), inside.URL, "", req, nil)
		if err != nil {
			t.Fatal(err)
		}
		if sum := rep.bd.pre + rep.bd.gen + rep.bd.post; sum != 0 && (sum != rep.dur || rep.bd.gen <= 0) {
			t.Fatalf("answered inside Generate: pre %v + gen %v + post %v, wall %v: want no split or one that adds up", rep.bd.pre, rep.bd.gen, rep.bd.post, rep.dur)
		}
	}
}
