package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/specgate/specgate/engine/tokenizer"
)

// ErrClosed is returned by Generate after Engine.Close.
var ErrClosed = errors.New("engine: closed")

// ErrBadRequest wraps invalid GenerateRequest fields.
var ErrBadRequest = errors.New("engine: bad request")

// Options tune an Engine. The zero value is usable.
type Options struct {
	// MaxBatch is the most requests forwarded together in one step; 0 = 32.
	MaxBatch int
	// PrefillChunk is the most prompt tokens of one request per step, so
	// that a long prompt does not stall running decodes; 0 = 512.
	PrefillChunk int
	// Speculator, when set, decodes every request (after its first token)
	// through speculation instead of plain batched decoding.
	Speculator Speculator
	// AckWait is how long a step waits for requests still handing their last
	// token to their caller, so that they join the batch; 0 = 2ms.
	AckWait time.Duration
	// DecodeSteps > 1 lets a lone greedy request (temperature 0, no
	// penalties, SkipLogprobs, no speculation, no other request active)
	// decode up to that many tokens per scheduler step through the
	// backend's GreedyStepper (multi-step decoding: one host round trip per
	// chunk, see engine/cuda DecodeGreedy), emitted as one chunk. 0 or 1:
	// one token per step; at most MaxDecodeSteps. serve sets 8 on the CUDA
	// backend.
	DecodeSteps int
}

// Engine serves Generate calls on one Model with continuous batching: one
// scheduler goroutine owns the model's forwards; requests join and leave
// between steps, and every step is one batched forward over all ready
// requests. Safe for concurrent use.
type Engine struct {
	m    *Model
	opts Options

	events chan event
	quit   chan struct{}
	done   chan struct{}
	once   sync.Once

	// counters for Stats (written by the scheduler)
	active, steps, generated, preempted atomic.Int64
}

// Stats is a snapshot of an engine's load and caches, for metrics.
type Stats struct {
	Active          int    // requests admitted and not finished
	Steps           int64  // scheduler steps run
	TokensGenerated int64  // completion tokens sampled
	Preemptions     int64  // decoding requests whose KV was given back under pressure
	KVBlocksUsed    int    // blocks held by sequences or the prefix cache
	KVBlocksTotal   int    // all blocks
	PrefixBlocks    int    // blocks held by the prefix cache
	PrefixLookups   uint64 // full prompt blocks looked up in the prefix cache
	PrefixHits      uint64 // of which found
}

// Stats returns current counters. Safe for concurrent use.
func (e *Engine) Stats() Stats {
	kv := e.m.kv
	lookups, hits := kv.PrefixCacheStats()
	return Stats{Active: int(e.active.Load()), Steps: e.steps.Load(), TokensGenerated: e.generated.Load(),
		Preemptions: e.preempted.Load(), KVBlocksUsed: kv.UsedBlocks(), KVBlocksTotal: kv.NumBlocks(),
		PrefixBlocks: kv.CachedBlocks(), PrefixLookups: lookups, PrefixHits: hits}
}

var _ Generator = (*Engine)(nil)

// New starts an engine's scheduler over m. Close stops it.
func New(m *Model, opts Options) *Engine {
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 32
	}
	if opts.PrefillChunk <= 0 {
		opts.PrefillChunk = 512
	}
	if opts.AckWait <= 0 {
		opts.AckWait = 2 * time.Millisecond
	}
	opts.DecodeSteps = min(opts.DecodeSteps, MaxDecodeSteps)
	e := &Engine{m: m, opts: opts, events: make(chan event, 64), quit: make(chan struct{}), done: make(chan struct{})}
	go e.loop()
	return e
}

// Model returns the engine's model.
func (e *Engine) Model() *Model { return e.m }

// Close stops the scheduler; running requests end with ErrClosed.
func (e *Engine) Close() error {
	e.once.Do(func() { close(e.quit) })
	<-e.done
	return nil
}

type eventKind int

const (
	evSubmit eventKind = iota
	evContinue
	evStop
)

type event struct {
	kind eventKind
	r    *request
}

// stepOut is what the scheduler hands a request's goroutine after a step.
type stepOut struct {
	toks     []int32
	logprobs []float32 // per token, the chosen token's logprob
	top      [][]TokenLogprob
	err      error
}

// request is one Generate call. Fields below "scheduler-owned" are touched
// only by the scheduler goroutine.
type request struct {
	ctx      context.Context
	req      GenerateRequest
	maxNew   int
	out      chan stepOut  // capacity 1
	released chan struct{} // closed once the KV is freed

	// scheduler-owned
	seq       *Sequence
	prefilled int // prompt tokens in KV
	cached    int
	generated []int32
	spec      Speculator
	state     *SpecState
	stats     SpecStats
	sampler   SamplingParams
	rng       *rand.Rand
	awaiting  bool // waiting for the caller's continue/stop
	// recompute: the KV was given back under memory pressure; recomputeCtx
	// (prompt + generated but the pending token) is prefilled again.
	recompute    bool
	recomputeCtx []int32
	preemptions  int
	lastStep     uint64 // scheduler step that last served the request
	finished     bool
}

// Generate implements Generator.
func (e *Engine) Generate(ctx context.Context, req GenerateRequest, emit func(Chunk) error) (Result, error) {
	cfg := e.m.Config
	res := Result{PromptTokens: len(req.Prompt)}
	if len(req.Prompt) == 0 {
		return res, fmt.Errorf("prompt: empty: %w", ErrBadRequest)
	}
	if len(req.Prompt) >= cfg.MaxPositions {
		return res, fmt.Errorf("prompt: %d tokens, context length %d: %w", len(req.Prompt), cfg.MaxPositions, ErrContextLength)
	}
	for i, t := range req.Prompt {
		if t < 0 || int(t) >= cfg.VocabSize {
			return res, fmt.Errorf("prompt: token %d = %d out of range [0, %d): %w", i, t, cfg.VocabSize, ErrBadRequest)
		}
	}
	if err := validateSampling(req.Sampling); err != nil {
		return res, err
	}
	if req.MaxTokens < 0 {
		return res, fmt.Errorf("max_tokens: %d negative: %w", req.MaxTokens, ErrBadRequest)
	}
	maxNew := cfg.MaxPositions - len(req.Prompt)
	if req.MaxTokens > 0 && req.MaxTokens < maxNew {
		maxNew = req.MaxTokens
	}
	if err := ctx.Err(); err != nil {
		res.Finish = FinishCancelled
		return res, err
	}
	r := &request{ctx: ctx, req: req, maxNew: maxNew, out: make(chan stepOut, 1), released: make(chan struct{})}
	select {
	case e.events <- event{evSubmit, r}:
	case <-e.quit:
		return res, ErrClosed
	case <-ctx.Done():
		res.Finish = FinishCancelled
		return res, ctx.Err()
	}
	res, err := e.consume(ctx, r, emit)
	// hand the request back and wait until its KV is freed.
	select {
	case e.events <- event{evStop, r}:
	case <-e.done:
	}
	select {
	case <-r.released:
	case <-e.done:
	}
	res.PromptTokens = len(req.Prompt)
	res.CachedTokens = r.cachedTokens()
	if e.specEnabled(r) {
		st := r.statsCopy()
		res.Spec = &st
	}
	return res, err
}

func validateSampling(p SamplingParams) error {
	bad := func(f string, a ...any) error { return fmt.Errorf("%s: %w", fmt.Sprintf(f, a...), ErrBadRequest) }
	switch {
	case p.Temperature < 0 || p.Temperature > 100 || p.Temperature != p.Temperature:
		return bad("temperature: %v out of range [0, 100]", p.Temperature)
	case p.TopK < 0:
		return bad("top_k: %d negative", p.TopK)
	case p.TopP < 0 || p.TopP > 1 || p.TopP != p.TopP:
		return bad("top_p: %v out of range [0, 1]", p.TopP)
	case p.MinP < 0 || p.MinP > 1 || p.MinP != p.MinP:
		return bad("min_p: %v out of range [0, 1]", p.MinP)
	case p.PresencePenalty < -2 || p.PresencePenalty > 2:
		return bad("presence_penalty: %v out of range [-2, 2]", p.PresencePenalty)
	case p.FrequencyPenalty < -2 || p.FrequencyPenalty > 2:
		return bad("frequency_penalty: %v out of range [-2, 2]", p.FrequencyPenalty)
	case p.Logprobs < 0 || p.Logprobs > 20:
		return bad("logprobs: %d out of range [0, 20]", p.Logprobs)
	}
	return nil
}

// results copied out under the scheduler's hand-off (read after released).
func (r *request) cachedTokens() int    { return r.cached }
func (r *request) statsCopy() SpecStats { return r.stats }
func (e *Engine) specEnabled(r *request) bool {
	return r.spec != nil
}

// consume runs on the caller's goroutine: it turns tokens into text, checks
// EOS, stop sequences and limits, and calls emit.
func (e *Engine) consume(ctx context.Context, r *request, emit func(Chunk) error) (Result, error) {
	var res Result
	tok := e.m.Tokenizer
	var dec *tokenizer.StreamDecoder
	if tok != nil {
		dec = tok.NewDecoder(true)
	}
	stops := make([]string, 0, len(r.req.Stop))
	for _, s := range r.req.Stop {
		if s != "" {
			stops = append(stops, s)
		}
	}
	eos := map[int32]bool{}
	for _, id := range e.m.Config.EOS {
		eos[id] = true
	}
	for _, id := range r.req.StopTokenIDs {
		eos[id] = true
	}
	held := "" // text not yet emitted because it may start a stop sequence
	n := 0
	for {
		var so stepOut
		select {
		case so = <-r.out:
		case <-ctx.Done():
			res.CompletionTokens = n
			res.Finish = FinishCancelled
			return res, ctx.Err()
		case <-e.done:
			res.CompletionTokens = n
			return res, ErrClosed
		}
		if so.err != nil {
			res.CompletionTokens = n
			if errors.Is(so.err, context.Canceled) || errors.Is(so.err, context.DeadlineExceeded) {
				res.Finish = FinishCancelled
			}
			return res, so.err
		}
		var ch Chunk
		var finish FinishReason
		stopped := false // by a stop string; the text before it is in ch.Text
		for i, t := range so.toks {
			n++
			if eos[t] {
				finish = FinishStop
				break
			}
			ch.Tokens = append(ch.Tokens, t)
			if so.logprobs != nil {
				lp := TokenLogprob{Token: t, Logprob: so.logprobs[i]}
				if tok != nil {
					lp.Text = tok.Decode([]int32{t}, false)
				}
				ch.Logprobs = append(ch.Logprobs, lp)
				if r.req.Sampling.Logprobs > 0 {
					top := so.top[i]
					if tok != nil {
						for j := range top {
							top[j].Text = tok.Decode([]int32{top[j].Token}, false)
						}
					}
					ch.Top = append(ch.Top, top)
				}
			}
			if dec != nil {
				held += dec.Add(t)
				if idx, ok := findStop(held, stops); ok {
					ch.Text += held[:idx]
					held = ""
					finish = FinishStop
					stopped = true
					break
				}
			}
			if n >= r.maxNew {
				finish = FinishLength
				break
			}
		}
		if !stopped {
			// emit all text that cannot begin a stop sequence
			if finish != "" && dec != nil {
				held += dec.Flush()
				if idx, ok := findStop(held, stops); ok {
					held = held[:idx]
					finish = FinishStop
				}
				ch.Text += held
				held = ""
			} else {
				k := holdBack(held, stops)
				ch.Text += held[:len(held)-k]
				held = held[len(held)-k:]
			}
		}
		if len(ch.Tokens) > 0 || ch.Text != "" {
			if err := emit(ch); err != nil {
				res.CompletionTokens = n
				res.Finish = FinishCancelled
				return res, err
			}
		}
		if finish != "" {
			res.CompletionTokens = n
			res.Finish = finish
			return res, nil
		}
		// a cancelled request stops before the next token.
		if err := ctx.Err(); err != nil {
			res.CompletionTokens = n
			res.Finish = FinishCancelled
			return res, err
		}
		select {
		case e.events <- event{evContinue, r}:
		case <-e.done:
			res.CompletionTokens = n
			return res, ErrClosed
		}
	}
}

// findStop returns the index of the earliest stop sequence in s.
func findStop(s string, stops []string) (int, bool) {
	best := -1
	for _, st := range stops {
		if i := strings.Index(s, st); i >= 0 && (best < 0 || i < best) {
			best = i
		}
	}
	return best, best >= 0
}

// holdBack is the length of the longest suffix of s that is a proper prefix
// of some stop sequence (that text must wait for the next tokens).
func holdBack(s string, stops []string) int {
	k := 0
	for _, st := range stops {
		for l := min(len(st)-1, len(s)); l > k; l-- {
			if strings.HasSuffix(s, st[:l]) {
				k = l
				break
			}
		}
	}
	return k
}

// ---- scheduler ----

func (e *Engine) loop() {
	defer close(e.done)
	var active []*request // admitted, not finished
	inflight := 0         // requests awaiting their caller's continue/stop
	var stepNo uint64
	handle := func(ev event) {
		r := ev.r
		switch ev.kind {
		case evSubmit:
			e.admit(r)
			active = append(active, r)
			e.active.Store(int64(len(active)))
		case evContinue:
			if r.awaiting {
				r.awaiting = false
				inflight--
			}
		case evStop:
			if r.awaiting {
				r.awaiting = false
				inflight--
			}
			for i, a := range active {
				if a == r {
					active = append(active[:i], active[i+1:]...)
					break
				}
			}
			e.active.Store(int64(len(active)))
			e.release(r)
		}
	}
	defer func() {
		for _, r := range active {
			if !r.finished {
				e.release(r)
			}
		}
	}()
	for {
		ready := e.readyList(active)
		if len(ready) == 0 {
			select {
			case ev := <-e.events:
				handle(ev)
			case <-e.quit:
				return
			}
			continue
		}
		// gather what arrived; give callers busy with their last token a moment to join.
		deadline := time.NewTimer(e.opts.AckWait)
	gather:
		for {
			select {
			case ev := <-e.events:
				handle(ev)
				continue
			case <-e.quit:
				deadline.Stop()
				return
			default:
			}
			if inflight == 0 {
				break
			}
			select {
			case ev := <-e.events:
				handle(ev)
			case <-deadline.C:
				break gather
			case <-e.quit:
				deadline.Stop()
				return
			}
		}
		deadline.Stop()
		ready = e.readyList(active)
		if len(ready) > e.opts.MaxBatch {
			// least recently served first, so that no request starves.
			slices.SortStableFunc(ready, func(a, b *request) int { return cmp.Compare(a.lastStep, b.lastStep) })
			ready = ready[:e.opts.MaxBatch]
		}
		stepNo++
		e.steps.Add(1)
		for _, r := range ready {
			r.lastStep = stepNo
		}
		e.step(ready, len(active))
		for _, r := range ready {
			if !r.finished {
				r.awaiting = true
				inflight++
			}
		}
	}
}

func (e *Engine) readyList(active []*request) []*request {
	var out []*request
	for _, r := range active {
		if !r.awaiting && !r.finished {
			out = append(out, r)
		}
	}
	return out
}

func (e *Engine) admit(r *request) {
	r.seq, r.cached = e.m.NewCachedSequence(r.req.Prompt, r.req.PrefixSalt)
	r.prefilled = r.cached
	r.sampler = r.req.Sampling
	r.rng = NewRand(r.req.Sampling.Seed)
	r.spec = e.opts.Speculator
	if r.req.Speculator != nil {
		r.spec = r.req.Speculator
	}
	if r.req.NoSpeculation {
		r.spec = nil
	}
}

// release frees a request's KV and speculator state (scheduler goroutine).
func (e *Engine) release(r *request) {
	if r.finished {
		return
	}
	r.finished = true
	if r.state != nil {
		if rel, ok := r.spec.(SpecReleaser); ok {
			rel.Release(r.state)
		}
	}
	if r.seq != nil {
		r.seq.Free()
	}
	close(r.released)
}

// fail ends a request with err: the caller sees err, then hands the request back.
func (e *Engine) fail(r *request, err error) {
	r.out <- stepOut{err: err}
}

// step runs one scheduler step over ready requests: one batched forward for
// plain requests (prefill chunks and decodes), then one Speculator.Step per
// speculative request. A prompt that finds the KV full while other requests
// run waits for them; otherwise the request fails with ErrKVExhausted.
func (e *Engine) step(ready []*request, active int) {
	var items []BatchItem
	var owners []*request
	var specs []*request
	for _, r := range ready {
		if err := r.ctx.Err(); err != nil {
			e.fail(r, err)
			continue
		}
		if ctxToks := r.context(); r.prefilled < len(ctxToks) {
			end := min(r.prefilled+e.opts.PrefillChunk, len(ctxToks))
			it := BatchItem{Seq: r.seq, Tokens: ctxToks[r.prefilled:end]}
			if end == len(ctxToks) && !r.recompute {
				it.LogitsRows = []int32{int32(end - r.prefilled - 1)}
			} else {
				it.LogitsRows = []int32{}
			}
			items = append(items, it)
			owners = append(owners, r)
			continue
		}
		if r.spec != nil {
			specs = append(specs, r)
			continue
		}
		if k := e.greedySteps(r, len(ready), active); k > 1 {
			toks, err := r.seq.DecodeGreedy(r.generated[len(r.generated)-1], k)
			switch {
			case err == nil:
				r.generated = append(r.generated, toks...)
				e.generated.Add(int64(len(toks)))
				r.out <- stepOut{toks: toks}
				continue
			case !errors.Is(err, ErrKVExhausted) && !errors.Is(err, ErrContextLength):
				e.fail(r, fmt.Errorf("engine: multi-step decode: %w", err))
				continue
			}
			// no room for k tokens: one plain step (which preempts or fails as usual)
		}
		items = append(items, BatchItem{Seq: r.seq, Tokens: []int32{r.generated[len(r.generated)-1]}})
		owners = append(owners, r)
	}
	if len(items) > 0 {
		if err := e.m.ForwardBatch(items); err != nil {
			// isolate the failing request(s): forward one by one.
			for i := range items {
				if err := e.m.ForwardBatch(items[i : i+1]); err != nil {
					r := owners[i]
					owners[i] = nil
					if errors.Is(err, ErrKVExhausted) && e.m.kv.UsedBlocks() > len(r.seq.t.Blocks) {
						e.preempt(r)
						r.out <- stepOut{} // no token this step; retried after the ack
						continue
					}
					e.fail(r, err)
				}
			}
		}
		for i, r := range owners {
			if r == nil {
				continue
			}
			it := items[i]
			if ctxToks := r.context(); r.prefilled < len(ctxToks) {
				r.prefilled += len(it.Tokens)
				if r.prefilled < len(ctxToks) || r.recompute {
					if r.prefilled == len(ctxToks) {
						r.recompute = false
					}
					r.out <- stepOut{} // progress without a token: keeps cancellation checks per step
					continue
				}
			}
			e.sampleInto(r, it.Logits)
		}
	}
	e.specSteps(specs, active)
}

// MaxDecodeSteps caps Options.DecodeSteps (a chunk's tokens are emitted
// together, and every GreedyStepper must accept this many steps).
const MaxDecodeSteps = 64

// greedySteps is how many tokens the lone request r may decode in this
// step through the backend's GreedyStepper (Options.DecodeSteps; 0 when
// the backend has none); <= 1: one plain step.
func (e *Engine) greedySteps(r *request, ready, active int) int {
	if e.opts.DecodeSteps <= 1 || ready != 1 || active != 1 || r.recompute {
		return 0
	}
	sp := r.sampler
	if sp.Temperature > 0 || sp.PresencePenalty != 0 || sp.FrequencyPenalty != 0 || sp.Logprobs > 0 || !r.req.Sampling.SkipLogprobs {
		return 0
	}
	if _, ok := e.m.backend.(GreedyStepper); !ok {
		return 0
	}
	return min(e.opts.DecodeSteps, r.maxNew-len(r.generated))
}

// specSteps advances speculative requests: those whose speculator is a
// BatchSpeculator together (one StepBatch per speculator), the others one
// Step each.
func (e *Engine) specSteps(specs []*request, active int) {
	groups := map[BatchSpeculator][]*request{}
	var order []BatchSpeculator
	for _, r := range specs {
		if b, ok := r.spec.(BatchSpeculator); ok {
			if _, seen := groups[b]; !seen {
				order = append(order, b)
			}
			groups[b] = append(groups[b], r)
			continue
		}
		st := e.specState(r, active)
		toks, err := r.spec.Step(st)
		e.specDone(r, st, toks, err)
	}
	for _, b := range order {
		rs := groups[b]
		states := make([]*SpecState, len(rs))
		for i, r := range rs {
			states[i] = e.specState(r, active)
		}
		out, errs := b.StepBatch(states)
		for i, r := range rs {
			if len(out) != len(rs) || len(errs) != len(rs) {
				e.fail(r, fmt.Errorf("engine: StepBatch returned %d results and %d errors for %d requests", len(out), len(errs), len(rs)))
				continue
			}
			e.specDone(r, states[i], out[i], errs[i])
		}
	}
}

// context is what a request's KV must hold before its next decode: the
// prompt, or after a preemption the prompt and all generated tokens but the
// pending one.
func (r *request) context() []int32 {
	if !r.recompute {
		return r.req.Prompt
	}
	return r.recomputeCtx
}

// preempt handles a request that found the KV full while other requests
// hold blocks. A prompt simply waits. A decoding request gives its KV back
// and recomputes it later (vLLM-style recompute preemption), so that the
// others can finish.
func (e *Engine) preempt(r *request) {
	if !r.recompute && r.prefilled < len(r.req.Prompt) {
		return // still prefilling the prompt: wait
	}
	if r.recompute {
		return // re-prefill waiting for room
	}
	ctxToks := make([]int32, 0, len(r.req.Prompt)+len(r.generated))
	ctxToks = append(ctxToks, r.req.Prompt...)
	ctxToks = append(ctxToks, r.generated[:len(r.generated)-1]...)
	r.seq.Free()
	r.seq, r.prefilled = e.m.NewCachedSequence(ctxToks, r.req.PrefixSalt)
	r.recompute = true
	r.recomputeCtx = ctxToks
	r.preemptions++
	e.preempted.Add(1)
}

func (e *Engine) sampleInto(r *request, logits []float32) {
	t := Sample(logits, r.sampler, r.generated, r.rng)
	r.generated = append(r.generated, t)
	e.generated.Add(1)
	so := stepOut{toks: []int32{t}}
	r.addLogprobs(&so, logits)
	r.out <- so
}

// addLogprobs fills so's logprobs (and top alternatives when asked) from
// rows ([len(so.toks)][VocabSize]): row i is the target's logits that
// predicted so.toks[i].
func (r *request) addLogprobs(so *stepOut, rows []float32) {
	V := len(rows) / len(so.toks)
	for i, t := range so.toks {
		lp := LogSoftmax(rows[i*V : (i+1)*V])
		so.logprobs = append(so.logprobs, lp[t])
		if r.req.Sampling.Logprobs > 0 {
			so.top = append(so.top, TopLogprobs(lp, r.req.Sampling.Logprobs))
		}
	}
}

// specState refreshes a request's SpecState before a speculative step.
func (e *Engine) specState(r *request, active int) *SpecState {
	if r.state == nil {
		r.state = &SpecState{Ctx: r.ctx, Target: e.m, Prompt: r.req.Prompt, Params: r.sampler, Rand: r.rng, Stats: &r.stats}
	}
	st := r.state
	st.Seq = r.seq
	r.seq.recordTree = true // verification rows for logprobs (SpecState.KeepTree)
	st.lpN = 0
	st.Generated = r.generated
	st.Pending = r.generated[len(r.generated)-1]
	st.MaxNew = max(r.maxNew-len(r.generated), 1)
	st.Active = active
	return st
}

// specDone checks one speculative step's result and hands it to the caller.
func (e *Engine) specDone(r *request, st *SpecState, toks []int32, err error) {
	if err != nil {
		e.fail(r, fmt.Errorf("engine: speculator: %w", err))
		return
	}
	r.stats.Steps++
	if len(toks) == 0 || len(toks) > st.MaxNew {
		e.fail(r, fmt.Errorf("engine: speculator returned %d tokens, want 1..%d", len(toks), st.MaxNew))
		return
	}
	r.generated = append(r.generated, toks...)
	e.generated.Add(int64(len(toks)))
	if want := len(r.req.Prompt) + len(r.generated) - 1; r.seq.Len() != want {
		e.fail(r, fmt.Errorf("engine: speculator left the target KV at %d tokens, want %d", r.seq.Len(), want))
		return
	}
	so := stepOut{toks: toks}
	// logprobs come from the verification rows SpecState.KeepTree or
	// PlainStep recorded; a speculator that bypasses both reports none.
	if V := e.m.Config.VocabSize; st.lpN == len(toks) && len(st.lpRows) == st.lpN*V {
		r.addLogprobs(&so, st.lpRows)
	}
	st.lpN = 0
	r.out <- so
}
