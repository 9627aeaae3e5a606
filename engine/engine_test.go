package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
)

func genConfig() Config {
	c := testConfigs()["gqa"]
	c.EOS = nil
	c.MaxPositions = 512
	return c
}

// manualGreedy decodes n tokens greedily through a Sequence.
func manualGreedy(t *testing.T, m *Model, prompt []int32, n int) []int32 {
	t.Helper()
	s := m.NewSequence()
	defer s.Free()
	lg, err := s.Forward(prompt, nil, []int32{int32(len(prompt) - 1)})
	if err != nil {
		t.Fatal(err)
	}
	var out []int32
	for range n {
		tok := Argmax(lg)
		out = append(out, tok)
		if lg, err = s.Forward([]int32{tok}, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func collect(e *Engine, ctx context.Context, req GenerateRequest) ([]int32, Result, error) {
	var toks []int32
	res, err := e.Generate(ctx, req, func(c Chunk) error {
		toks = append(toks, c.Tokens...)
		return nil
	})
	return toks, res, err
}

func TestGenerateGreedyAndLimits(t *testing.T) {
	m := NewRandomModel(genConfig(), 21, LoadOptions{KVTokens: 2048, BlockSize: 4, Threads: 2})
	e := New(m, Options{PrefillChunk: 5})
	defer e.Close()
	prompt := []int32{1, 5, 7, 9, 11, 13, 17, 19, 23, 29, 31}
	want := manualGreedy(t, m, prompt, 20)
	got, res, err := collect(e, context.Background(), GenerateRequest{Prompt: prompt, MaxTokens: 20})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Generate %v\nmanual   %v", got, want)
	}
	if res.Finish != FinishLength || res.CompletionTokens != 20 || res.PromptTokens != len(prompt) {
		t.Fatalf("result %+v", res)
	}
	// a stop token ends generation before it is emitted.
	stop := want[7]
	first := 0
	for first < len(want) && want[first] != stop {
		first++
	}
	got, res, err = collect(e, context.Background(), GenerateRequest{Prompt: prompt, MaxTokens: 20, StopTokenIDs: []int32{stop}})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want[:first]) || res.Finish != FinishStop || res.CompletionTokens != first+1 {
		t.Fatalf("stop token %d: got %v (%+v), want %v", stop, got, res, want[:first])
	}
	// context length
	long := make([]int32, m.Config.MaxPositions)
	if _, _, err := collect(e, context.Background(), GenerateRequest{Prompt: long}); !errors.Is(err, ErrContextLength) {
		t.Fatalf("err %v, want ErrContextLength", err)
	}
	// generation up to the context length ends with "length".
	near := make([]int32, m.Config.MaxPositions-3)
	got, res, err = collect(e, context.Background(), GenerateRequest{Prompt: near})
	if err != nil || len(got) != 3 || res.Finish != FinishLength {
		t.Fatalf("near context: %d tokens, %+v, %v", len(got), res, err)
	}
	if _, _, err := collect(e, context.Background(), GenerateRequest{Prompt: prompt, Sampling: SamplingParams{TopP: 2}}); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("top_p 2: err %v", err)
	}
}

func TestGenerateCancelFreesKV(t *testing.T) {
	m := NewRandomModel(genConfig(), 22, LoadOptions{KVTokens: 2048, BlockSize: 4, Threads: 2, DisablePrefixCache: true})
	e := New(m, Options{})
	defer e.Close()
	base := m.KV().UsedBlocks()
	prompt := []int32{3, 4, 5, 6, 7, 8, 9, 10, 11}
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	res, err := e.Generate(ctx, GenerateRequest{Prompt: prompt, MaxTokens: 200}, func(c Chunk) error {
		n += len(c.Tokens)
		if n >= 3 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) || res.Finish != FinishCancelled {
		t.Fatalf("err %v finish %q", err, res.Finish)
	}
	if n != 3 {
		t.Fatalf("%d tokens emitted after cancelling at the 3rd", n)
	}
	if u := m.KV().UsedBlocks(); u != base {
		t.Fatalf("used blocks %d after cancel, baseline %d", u, base)
	}
	// an emit error stops too.
	boom := errors.New("client gone")
	n = 0
	_, err = e.Generate(context.Background(), GenerateRequest{Prompt: prompt, MaxTokens: 200}, func(c Chunk) error {
		n += len(c.Tokens)
		if n >= 2 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || n != 2 {
		t.Fatalf("emit error: err %v after %d tokens", err, n)
	}
	if u := m.KV().UsedBlocks(); u != base {
		t.Fatalf("used blocks %d after emit error, baseline %d", u, base)
	}
	// an already cancelled context does nothing.
	if _, _, err := collect(e, ctx, GenerateRequest{Prompt: prompt}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled ctx: %v", err)
	}
}

// TestGenerateConcurrent: concurrent requests (batched by the scheduler)
// produce exactly what each produces alone; seeded sampling included.
func TestGenerateConcurrent(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	m := NewRandomModel(genConfig(), 23, LoadOptions{KVTokens: 4096, BlockSize: 4, Threads: 2})
	e := New(m, Options{PrefillChunk: 7})
	defer e.Close()
	r := rand.New(rand.NewPCG(9, 9))
	var reqs []GenerateRequest
	for i := range 6 {
		seed := uint64(i)
		sp := SamplingParams{}
		if i%2 == 1 {
			sp = SamplingParams{Temperature: 0.9, TopP: 0.9, Seed: &seed, FrequencyPenalty: 0.3}
		}
		reqs = append(reqs, GenerateRequest{Prompt: randTokens(r, 5+3*i, m.Config.VocabSize), MaxTokens: 15 + i, Sampling: sp})
	}
	alone := make([][]int32, len(reqs))
	for i, q := range reqs {
		toks, _, err := collect(e, context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		alone[i] = toks
	}
	together := make([][]int32, len(reqs))
	var wg sync.WaitGroup
	for i, q := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			toks, _, err := collect(e, context.Background(), q)
			if err != nil {
				t.Error(err)
			}
			together[i] = toks
		}()
	}
	wg.Wait()
	for i := range reqs {
		if fmt.Sprint(alone[i]) != fmt.Sprint(together[i]) {
			t.Fatalf("request %d: alone %v, batched %v", i, alone[i], together[i])
		}
	}
}

func TestGeneratePrefixCache(t *testing.T) {
	m := NewRandomModel(genConfig(), 24, LoadOptions{KVTokens: 2048, BlockSize: 4, Threads: 2})
	e := New(m, Options{})
	defer e.Close()
	r := rand.New(rand.NewPCG(3, 3))
	system := randTokens(r, 22, m.Config.VocabSize)
	p1 := append(append([]int32(nil), system...), 4, 5, 6)
	want := manualGreedy(t, m, p1, 12)
	got, res, err := collect(e, context.Background(), GenerateRequest{Prompt: p1, MaxTokens: 12, PrefixSalt: "a"})
	if err != nil || res.CachedTokens != 0 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("first: %v %+v %v", got, res, err)
	}
	got, res, err = collect(e, context.Background(), GenerateRequest{Prompt: p1, MaxTokens: 12, PrefixSalt: "a"})
	if err != nil || res.CachedTokens != 24 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("second (cached): %v cached %d, %v; want %v with 24 cached", got, res.CachedTokens, err, want)
	}
	if _, res, _ = collect(e, context.Background(), GenerateRequest{Prompt: p1, MaxTokens: 2, PrefixSalt: "b"}); res.CachedTokens != 0 {
		t.Fatalf("other tenant got %d cached tokens", res.CachedTokens)
	}
	// a prompt sharing only the system part reuses its full blocks.
	p2 := append(append([]int32(nil), system...), 9, 9, 9, 9, 9)
	want2 := manualGreedy(t, m, p2, 8)
	got, res, _ = collect(e, context.Background(), GenerateRequest{Prompt: p2, MaxTokens: 8, PrefixSalt: "a"})
	if res.CachedTokens != 20 || fmt.Sprint(got) != fmt.Sprint(want2) {
		t.Fatalf("shared system: %v cached %d, want %v with 20", got, res.CachedTokens, want2)
	}
	st := e.Stats()
	if st.PrefixHits == 0 || st.PrefixLookups < st.PrefixHits || st.TokensGenerated < 12+12+2+8 || st.Active != 0 || st.KVBlocksTotal != 512 {
		t.Fatalf("stats %+v", st)
	}
	m.KV().DropPrefixCache()
	if u := m.KV().UsedBlocks(); u != 0 {
		t.Fatalf("%d blocks used after dropping the cache", u)
	}
}

// TestGenerateKVPressure: with KV for little more than one request, a
// second concurrent prompt waits for the first to finish instead of failing;
// a prompt larger than the whole KV fails with ErrKVExhausted.
func TestGenerateKVPressure(t *testing.T) {
	m := NewRandomModel(genConfig(), 25, LoadOptions{KVTokens: 48, BlockSize: 4, Threads: 2, DisablePrefixCache: true})
	e := New(m, Options{})
	defer e.Close()
	p1 := randTokens(rand.New(rand.NewPCG(1, 1)), 20, m.Config.VocabSize)
	p2 := randTokens(rand.New(rand.NewPCG(2, 2)), 20, m.Config.VocabSize)
	want1, want2 := manualGreedy(t, m, p1, 10), manualGreedy(t, m, p2, 10)
	var wg sync.WaitGroup
	got := make([][]int32, 2)
	errs := make([]error, 2)
	for i, p := range [][]int32{p1, p2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], _, errs[i] = collect(e, context.Background(), GenerateRequest{Prompt: p, MaxTokens: 10})
		}()
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("errors %v %v", errs[0], errs[1])
	}
	if fmt.Sprint(got[0]) != fmt.Sprint(want1) || fmt.Sprint(got[1]) != fmt.Sprint(want2) {
		t.Fatalf("outputs under KV pressure differ: %v / %v", got, [][]int32{want1, want2})
	}
	if _, _, err := collect(e, context.Background(), GenerateRequest{Prompt: make([]int32, 60), MaxTokens: 2}); !errors.Is(err, ErrKVExhausted) {
		t.Fatalf("oversized prompt: %v", err)
	}
	if m.KV().UsedBlocks() != 0 {
		t.Fatalf("%d blocks used", m.KV().UsedBlocks())
	}
}

func TestGenerateLogprobs(t *testing.T) {
	m := NewRandomModel(genConfig(), 26, LoadOptions{KVTokens: 512, BlockSize: 4, Threads: 2})
	e := New(m, Options{})
	defer e.Close()
	prompt := []int32{7, 8, 9}
	s := m.NewSequence()
	lg, _ := s.Forward(prompt, nil, []int32{2})
	s.Free()
	lp := LogSoftmax(lg)
	first := Argmax(lg)
	var chunks []Chunk
	_, err := e.Generate(context.Background(), GenerateRequest{Prompt: prompt, MaxTokens: 4, Sampling: SamplingParams{Logprobs: 3}},
		func(c Chunk) error { chunks = append(chunks, c); return nil })
	if err != nil {
		t.Fatal(err)
	}
	c := chunks[0]
	if len(c.Tokens) != 1 || c.Tokens[0] != first || len(c.Logprobs) != 1 || len(c.Top) != 1 || len(c.Top[0]) != 3 {
		t.Fatalf("first chunk %+v", c)
	}
	if c.Logprobs[0].Logprob != lp[first] || c.Top[0][0].Token != first || c.Top[0][0].Logprob < c.Top[0][1].Logprob {
		t.Fatalf("logprobs %+v top %+v, want chosen %d with %v", c.Logprobs, c.Top[0], first, lp[first])
	}
}

func TestEngineCloseEndsRequests(t *testing.T) {
	m := NewRandomModel(genConfig(), 27, LoadOptions{KVTokens: 512, BlockSize: 4, Threads: 2})
	e := New(m, Options{})
	started := make(chan struct{})
	var once sync.Once
	done := make(chan error)
	go func() {
		_, err := e.Generate(context.Background(), GenerateRequest{Prompt: []int32{1, 2}, MaxTokens: 400}, func(Chunk) error {
			once.Do(func() { close(started) })
			return nil
		})
		done <- err
	}()
	<-started
	e.Close()
	if err := <-done; err != nil && !errors.Is(err, ErrClosed) {
		t.Fatalf("err %v, want nil or ErrClosed", err)
	}
	if _, _, err := collect(e, context.Background(), GenerateRequest{Prompt: []int32{1}}); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

// TestGenerateMaxBatchFair: with MaxBatch 2 and 5 concurrent requests every
// request completes with its solo output.
func TestGenerateMaxBatchFair(t *testing.T) {
	m := NewRandomModel(genConfig(), 28, LoadOptions{KVTokens: 2048, BlockSize: 4, Threads: 2})
	e := New(m, Options{MaxBatch: 2})
	defer e.Close()
	var wg sync.WaitGroup
	got := make([][]int32, 5)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], _, _ = collect(e, context.Background(), GenerateRequest{Prompt: []int32{int32(i + 1), 3, 4}, MaxTokens: 12})
		}()
	}
	wg.Wait()
	for i := range got {
		if want := manualGreedy(t, m, []int32{int32(i + 1), 3, 4}, 12); fmt.Sprint(got[i]) != fmt.Sprint(want) {
			t.Fatalf("request %d: %v, want %v", i, got[i], want)
		}
	}
}

// countingStepper wraps a CPUBackend and counts DecodeGreedy calls.
type countingStepper struct {
	*CPUBackend
	calls, steps int
	fail         error
}

func (c *countingStepper) DecodeGreedy(token, pos int32, cached, slots []int32, out []int32) error {
	if c.fail != nil {
		return c.fail
	}
	c.calls++
	c.steps += len(slots)
	return c.CPUBackend.DecodeGreedy(token, pos, cached, slots, out)
}

// TestMultiStepDecode: with Options.DecodeSteps a lone greedy request that
// skips logprobs decodes several tokens per scheduler step through the
// backend's GreedyStepper, with the tokens of one-step decoding; max_tokens,
// stop tokens and stop strings cut a chunk in the middle; sampled
// requests, requests that want logprobs, and DecodeSteps 0 keep one token
// per step; after a multi-step run the sequence's KV serves the next
// request's prefix like any other.
func TestMultiStepDecode(t *testing.T) {
	m := NewRandomModel(genConfig(), 21, LoadOptions{KVTokens: 2048, BlockSize: 4, Threads: 2})
	cs := &countingStepper{CPUBackend: m.backend.(*CPUBackend)}
	m.backend = cs
	prompt := []int32{1, 5, 7, 9, 11, 13, 17, 19, 23, 29, 31}
	want := manualGreedy(t, m, prompt, 30)
	e := New(m, Options{DecodeSteps: 8})
	defer e.Close()
	greedy := SamplingParams{SkipLogprobs: true}
	var chunks []int
	res, err := e.Generate(context.Background(), GenerateRequest{Prompt: prompt, MaxTokens: 30, Sampling: greedy}, func(c Chunk) error {
		chunks = append(chunks, len(c.Tokens))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := collect(e, context.Background(), GenerateRequest{Prompt: prompt, MaxTokens: 30, Sampling: greedy})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || res.CompletionTokens != 30 || res.Finish != FinishLength {
		t.Fatalf("multi-step %v (%+v)\none-step   %v", got, res, want)
	}
	// first token from the prefill, then chunks of <= 8: 1 + 8 + 8 + 8 + 5
	if fmt.Sprint(chunks) != "[1 8 8 8 5]" || cs.calls != 8 || cs.steps != 2*29 {
		t.Fatalf("chunks %v, DecodeGreedy calls %d steps %d; want [1 8 8 8 5], 8 calls, 58 steps", chunks, cs.calls, cs.steps)
	}
	// a stop token inside a chunk ends generation there
	stop := want[12]
	first := 0
	for want[first] != stop {
		first++
	}
	got, res, err = collect(e, context.Background(), GenerateRequest{Prompt: prompt, MaxTokens: 30, StopTokenIDs: []int32{stop}, Sampling: greedy})
	if err != nil || fmt.Sprint(got) != fmt.Sprint(want[:first]) || res.Finish != FinishStop {
		t.Fatalf("stop token %d: %v (%+v, %v), want %v", stop, got, res, err, want[:first])
	}
	// requests that are sampled or want logprobs, and an engine without DecodeSteps, stay one token per step
	calls := cs.calls
	for _, c := range []struct {
		e  *Engine
		sp SamplingParams
	}{{e, SamplingParams{}}, {e, SamplingParams{SkipLogprobs: true, Temperature: 0.7}}, {e, SamplingParams{SkipLogprobs: true, Logprobs: 2}}} {
		if _, err := e.Generate(context.Background(), GenerateRequest{Prompt: prompt, MaxTokens: 10, Sampling: c.sp}, func(ch Chunk) error {
			if len(ch.Tokens) > 1 {
				return fmt.Errorf("sampling %+v: chunk of %d tokens", c.sp, len(ch.Tokens))
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	e1 := New(m, Options{})
	defer e1.Close()
	got, _, err = collect(e1, context.Background(), GenerateRequest{Prompt: prompt, MaxTokens: 30, Sampling: greedy})
	if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("DecodeSteps 0: %v (%v), want %v", got, err, want)
	}
	if cs.calls != calls {
		t.Fatalf("DecodeGreedy called %d times by one-token requests", cs.calls-calls)
	}
	// a prompt extending the multi-step output reuses its cached blocks and decodes the same
	ext := append(append([]int32(nil), prompt...), want[:20]...)
	wantExt := manualGreedy(t, m, ext, 6)
	got, res, err = collect(e, context.Background(), GenerateRequest{Prompt: ext, MaxTokens: 6, Sampling: greedy})
	if err != nil || fmt.Sprint(got) != fmt.Sprint(wantExt) {
		t.Fatalf("extended prompt: %v (%v), want %v", got, err, wantExt)
	}
	t.Logf("chunks %v; cached prompt tokens on the extension: %d", chunks, res.CachedTokens)
	// a backend without GreedyStepper: Sequence.DecodeGreedy refuses, the engine stays one token per step
	plain := NewRandomModel(genConfig(), 21, LoadOptions{KVTokens: 256, BlockSize: 4, Threads: 2})
	plain.backend = struct{ Backend }{plain.backend}
	sq := plain.NewSequence()
	if _, err := sq.DecodeGreedy(1, 4); !errors.Is(err, ErrBackendMissing) {
		t.Fatalf("DecodeGreedy without a stepper: %v, want ErrBackendMissing", err)
	}
	sq.Free()
	ep := New(plain, Options{DecodeSteps: 8})
	got, _, err = collect(ep, context.Background(), GenerateRequest{Prompt: prompt, MaxTokens: 30, Sampling: greedy})
	ep.Close()
	if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("engine over a backend without a stepper: %v (%v), want %v", got, err, want)
	}
	// a stepper error other than a full KV fails the request instead of hiding behind plain steps
	cs.fail = errors.New("device lost")
	if _, _, err := collect(e, context.Background(), GenerateRequest{Prompt: prompt, MaxTokens: 30, Sampling: greedy}); err == nil || !strings.Contains(err.Error(), "device lost") {
		t.Fatalf("failing stepper: err %v, want the stepper's error", err)
	}
}
