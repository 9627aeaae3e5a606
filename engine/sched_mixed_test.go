package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"
)

// finishLog is a FinishObserver proposer that drafts nothing and records
// what each request's output was when it finished.
type finishLog struct {
	mu  sync.Mutex
	out map[string][]int32 // by prompt
}

func (f *finishLog) Propose(_ context.Context, reqs []ProposeRequest) ([]Proposal, error) {
	return make([]Proposal, len(reqs)), nil
}
func (f *finishLog) Release(RequestID) {}
func (f *finishLog) Finished(_ RequestID, _ string, prompt, output []int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.out[fmt.Sprint(prompt)] = append([]int32(nil), output...)
}

// TestSchedulerMixedLoad: 40 concurrent requests on a KV pool small enough
// to preempt, four rounds (fixed and adaptive drafts, multi-step decoding
// on), each request one of: greedy to a token limit, a stop token, a
// draft-model tree, a cancel or an emit error (hang-up) after k tokens, a
// slow emitter, logprobs, a seeded sampled request, a sampled request with
// trees, a stop string with a slow emitter and a FinishObserver. With the
// scheduler serving a request while its caller still emits (maxAhead),
// every greedy output is the one-request greedy decode, cut where the
// caller stopped (no token lost, repeated or out of the vocabulary), the
// seeded one is the same as alone, a cancelled or hung-up one is a prefix,
// what the FinishObserver learns is what the caller kept, and no request
// stays active or holds KV afterwards.
func TestSchedulerMixedLoad(t *testing.T) {
	cfg := genConfig()
	tok, chars := charTokenizer(t)
	m := NewRandomModel(cfg, 71, LoadOptions{KVTokens: 360, BlockSize: 4, Threads: 1, DisablePrefixCache: true})
	m.Tokenizer = tok
	draft := NewRandomModel(cfg, 72, LoadOptions{KVTokens: 4096, BlockSize: 4, Threads: 1, DisablePrefixCache: true})
	r := rand.New(rand.NewPCG(9, 9))
	const N = 40
	prompts := make([][]int32, N)
	wants := make([][]int32, N)
	for i := range prompts {
		prompts[i] = randTokens(r, 5+r.IntN(20), cfg.VocabSize)
		wants[i] = manualGreedy(t, m, prompts[i], 40)
	}
	seed := uint64(77)
	sampled := GenerateRequest{Prompt: prompts[0], MaxTokens: 30, Sampling: SamplingParams{Temperature: 0.9, Seed: &seed, SkipLogprobs: true}}
	e0 := New(m, Options{})
	wantSampled, _, err := collect(e0, context.Background(), sampled)
	e0.Close()
	if err != nil {
		t.Fatal(err)
	}
	for round := range 4 {
		mc := newModelChain(draft, true)
		fl := &finishLog{out: map[string][]int32{}}
		var finished sync.Map
		e := New(m, Options{DecodeSteps: 8, FixedDraft: round%2 == 0, MaxDraft: 4})
		var wg sync.WaitGroup
		var mu sync.Mutex
		var errs []string
		for i := range N {
			mode := r.IntN(10)
			maxTok := 1 + r.IntN(40)
			k := r.IntN(maxTok + 1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				want := wants[i][:maxTok]
				req := GenerateRequest{Prompt: prompts[i], MaxTokens: maxTok, Sampling: SamplingParams{SkipLogprobs: true}}
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				var toks []int32
				var text strings.Builder
				nlp := 0
				emitErr := errors.New("hang-up")
				emit := func(c Chunk) error {
					toks = append(toks, c.Tokens...)
					text.WriteString(c.Text)
					nlp += len(c.Logprobs)
					switch mode {
					case 3:
						if len(toks) >= k {
							cancel()
						}
					case 4:
						if len(toks) >= k {
							return emitErr
						}
					case 5, 9:
						time.Sleep(200 * time.Microsecond)
					}
					return nil
				}
				switch mode {
				case 1:
					stop := want[k%len(want)]
					req.StopTokenIDs = []int32{stop}
					j := 0
					for want[j] != stop {
						j++
					}
					want = want[:j]
				case 2:
					req.Proposers = []Proposer{mc}
				case 6:
					req.Sampling = SamplingParams{Logprobs: 2}
				case 7:
					req = sampled
					want = wantSampled
				case 8:
					req.Proposers = []Proposer{mc}
					req.Sampling = SamplingParams{Temperature: 0.7}
					want = nil
				case 9:
					req.Proposers = []Proposer{mc, fl}
				}
				var wantText string
				if mode == 9 {
					var full strings.Builder
					for _, id := range want {
						full.WriteString(chars[id])
					}
					ft := full.String()
					stop := ft[k%len(ft) : min(k%len(ft)+2, len(ft))]
					req.Stop = []string{stop}
					j := strings.Index(ft, stop)
					wantText = ft[:j]
					n := 0 // tokens through the one that completes the stop string
					for l := 0; l < j+len(stop); n++ {
						l += len(chars[want[n]])
					}
					want = want[:n]
				}
				res, err := e.Generate(ctx, req, emit)
				if mode == 9 {
					if text.String() != wantText || res.Finish != FinishStop {
						mu.Lock()
						errs = append(errs, fmt.Sprintf("req %d stop string: text %q (%s), want %q", i, text.String(), res.Finish, wantText))
						mu.Unlock()
					}
					finished.Store(fmt.Sprint(prompts[i]), fmt.Sprint(toks))
				}
				fail := func(f string, a ...any) {
					mu.Lock()
					errs = append(errs, fmt.Sprintf("req %d mode %d max %d k %d: ", i, mode, maxTok, k)+fmt.Sprintf(f, a...))
					mu.Unlock()
				}
				switch mode {
				case 3, 4:
					if len(toks) > len(want) || fmt.Sprint(toks) != fmt.Sprint(want[:len(toks)]) {
						fail("got %v, want a prefix of %v", toks, want)
					}
					if err == nil && len(toks) != len(want) {
						fail("no error, %d of %d tokens", len(toks), len(want))
					}
				case 8:
					if err != nil || len(toks) != maxTok {
						fail("%v: %d tokens", err, len(toks))
					}
				default:
					if err != nil || fmt.Sprint(toks) != fmt.Sprint(want) {
						fail("got %v (%v)\nwant %v", toks, err, want)
					}
					if mode == 6 && nlp != len(toks) {
						fail("%d logprobs for %d tokens", nlp, len(toks))
					}
					if mode == 1 && res.CompletionTokens != len(want)+1 && res.CompletionTokens != len(want) {
						fail("completion tokens %d", res.CompletionTokens)
					}
				}
			}()
		}
		wg.Wait()
		st := e.Stats()
		e.Close()
		finished.Range(func(p, toks any) bool {
			if got := fmt.Sprint(fl.out[p.(string)]); got != toks.(string) {
				t.Errorf("prompt %s: FinishObserver learned %s, the caller kept %s", p, got, toks)
			}
			return true
		})
		for _, s := range errs {
			t.Error(s)
		}
		if st.Active != 0 || m.KV().UsedBlocks() != 0 {
			t.Fatalf("round %d: active %d, %d KV blocks used after all requests (stats %+v)", round, st.Active, m.KV().UsedBlocks(), st)
		}
		t.Logf("round %d: preemptions %d, spec steps %d, steps %d", round, st.Preemptions, st.SpecSteps, st.Steps)
	}
}
