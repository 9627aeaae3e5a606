package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/specgate/specgate/tokenizer"
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
	// Proposers draft token trees for every request that does not set its
	// own (GenerateRequest.Proposers) or NoSpeculation; nil = plain decoding.
	Proposers []Proposer
	// SpecBudget caps the draft nodes verified per step over all requests
	// (0 = 64); MaxDraft caps them per request (0 = 16). Within the caps the
	// engine spends only what pays: it adds a request's next draft node
	// while the expected tokens per second of the step grow (expected
	// acceptance from each request's and source's history, step time from
	// measured forwards and proposer calls).
	SpecBudget, MaxDraft int
	// FixedDraft gives every speculative request MaxDraft nodes per step
	// (within SpecBudget and its depth limit) whatever they cost: the fixed
	// modes of `specgate bench spec`; the default is the adaptive budget.
	FixedDraft bool
	// StepCost, when set, prices a target step of T tokens in place of the
	// engine's timings of its forwards (calibration and every step), so the
	// adaptive budget decides the same way on a quiet and on a loaded
	// machine: for tests of the budget's decisions, or a backend whose cost
	// curve is known. Proposer calls are still timed (ProposeCost fixes them).
	StepCost func(tokens int) time.Duration
	// ProposeCost, when set, prices a proposer's call per depth level of
	// its deepest proposal in place of the call's measured wall time, so
	// that with StepCost or StepClassCost the budget's decisions do not
	// depend on the machine's load at all (tests).
	ProposeCost func() time.Duration
	// StepClassCost, when set, replaces StepCost with a price per class of
	// step: tree (the step verifies draft trees) and heads (it runs draft
	// heads on the backend). The engine keeps one cost curve per class
	// (stepClasses); StepCost prices every class alike.
	StepClassCost func(tokens int, tree, heads bool) time.Duration
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
	active, waiting, steps, generated, preempted                atomic.Int64
	forwards, specSteps, specProposed, specAccepted, specBudget atomic.Int64
	proposeErrors, satOut                                       atomic.Int64
	acceptedAt                                                  [statDepths]atomic.Int64
	// nanoseconds of host time: steps, their Propose phase (budget and
	// proposer calls), their backend forwards
	stepNs, proposeNs, forwardNs atomic.Int64
	// of the rest: handing outputs over after the forward (sampling,
	// verification, KV compaction), of which the KV compaction
	verifyNs, keepNs atomic.Int64

	// scheduler-owned
	nextID  RequestID
	admitNo uint64
	// cost prices plain steps; costTree steps that verify draft trees
	// (on the GPU those run another path: exact chunked GEMVs, the rows'
	// argmax), costHeads steps that run draft heads on the backend, and
	// costTreeHeads both (stepClasses).
	cost, costTree, costHeads, costTreeHeads stepCost
	calibrated, calibratedHeads              bool
	// propCost: seconds of one Propose call per depth level, the median of
	// recent calls (a mean took the spikes of a shared machine and the
	// catch-up of a draft model after dormant steps: measured here, a
	// restricted-vocabulary draft level priced at 0.9-1.0 one-token target
	// steps instead of ~0.2, so the budget stopped at depth 1).
	propCost map[Proposer]*costWindow
	props    map[Proposer]*propState
	// availBlocks is the KV pool's available blocks when makeRoom last
	// let a step through (the step's draft budget reads it: counting them
	// walks the prefix cache, ~1000s of blocks on a GPU pool, and a second
	// walk per step cost speculative requests several µs per step).
	availBlocks int
	// specStreak counts steps in a row that verified drafts.
	specStreak int
	scr        proposeScratch
}

// statDepths is the number of depths Stats.AcceptedAt reports.
const statDepths = 16

// Stats is a snapshot of an engine's load and caches, for metrics.
type Stats struct {
	Active          int    // requests submitted and not finished (running + waiting)
	Waiting         int    // of which waiting for KV memory (not admitted, or preempted)
	Steps           int64  // scheduler steps run
	TokensGenerated int64  // completion tokens sampled
	Preemptions     int64  // decoding requests whose KV was given back under pressure
	KVBlocksUsed    int    // blocks held by sequences or the prefix cache
	KVBlocksTotal   int    // all blocks
	PrefixBlocks    int    // blocks held by the prefix cache
	PrefixLookups   uint64 // full prompt blocks looked up in the prefix cache
	PrefixHits      uint64 // of which found
	// Speculation: backend forwards of the target (one per step that
	// forwards anything), steps that verified draft trees, draft nodes
	// proposed (verified) and accepted as the requests' SpecStats count
	// them (what their callers took: specstats.go), the verification
	// budget spent (nodes of the trees verified), and accepted nodes per
	// depth (AcceptedAt[d-1]: depth d; counted as SpecAccepted).
	Forwards, SpecSteps, SpecProposed, SpecAccepted, SpecBudgetUsed int64
	AcceptedAt                                                      [statDepths]int64
	// ProposeErrors counts requests whose proposer failed or returned an
	// invalid tree in a step (the request then decoded plainly).
	ProposeErrors int64
	// SatOut counts, over all steps, running requests a step did not serve
	// because their callers were maxAhead outputs behind (slow readers).
	SatOut int64
	// StepTime is the wall time of the scheduler's steps (building the
	// batch, proposing, the forward, sampling and verification; not the
	// waits between steps); ProposeTime the part spent deciding draft
	// budgets and in Propose calls, ForwardTime the part in the target's
	// forwards.
	StepTime, ProposeTime, ForwardTime time.Duration
	// VerifyTime is the part after the forward that samples, verifies
	// trees and hands the outputs over; KeepTime, of it, the KV compaction
	// of verified trees (Sequence.KeepTree).
	VerifyTime, KeepTime time.Duration
}

// Stats returns current counters. Safe for concurrent use.
func (e *Engine) Stats() Stats {
	kv := e.m.kv
	lookups, hits := kv.PrefixCacheStats()
	st := Stats{Active: int(e.active.Load()), Waiting: int(e.waiting.Load()), Steps: e.steps.Load(), TokensGenerated: e.generated.Load(),
		Preemptions: e.preempted.Load(), SatOut: e.satOut.Load(), KVBlocksUsed: kv.UsedBlocks(), KVBlocksTotal: kv.NumBlocks(),
		PrefixBlocks: kv.CachedBlocks(), PrefixLookups: lookups, PrefixHits: hits,
		Forwards: e.forwards.Load(), SpecSteps: e.specSteps.Load(), SpecProposed: e.specProposed.Load(),
		SpecAccepted: e.specAccepted.Load(), SpecBudgetUsed: e.specBudget.Load(),
		ProposeErrors: e.proposeErrors.Load(), StepTime: time.Duration(e.stepNs.Load()),
		ProposeTime: time.Duration(e.proposeNs.Load()), ForwardTime: time.Duration(e.forwardNs.Load()),
		VerifyTime: time.Duration(e.verifyNs.Load()), KeepTime: time.Duration(e.keepNs.Load())}
	for i := range st.AcceptedAt {
		st.AcceptedAt[i] = e.acceptedAt[i].Load()
	}
	return st
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
	opts.DecodeSteps = min(opts.DecodeSteps, MaxDecodeSteps)
	if opts.SpecBudget <= 0 {
		opts.SpecBudget = 64
	}
	if opts.MaxDraft <= 0 {
		opts.MaxDraft = 16
	}
	e := &Engine{m: m, opts: opts, events: make(chan event, 64), quit: make(chan struct{}), done: make(chan struct{}),
		propCost: map[Proposer]*costWindow{}, props: map[Proposer]*propState{}}
	e.costTree.of, e.costHeads.of, e.costTreeHeads.of = &e.cost, &e.cost, &e.costTree
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
	out      chan stepOut  // capacity maxAhead
	released chan struct{} // closed once the KV is freed

	// scheduler-owned
	id        RequestID
	seq       *Sequence // nil while waiting for admission
	admitted  uint64    // admission order (preemption takes the newest)
	prefilled int       // prompt tokens in KV
	cached    int
	generated []int32
	stats     SpecStats
	sampler   SamplingParams
	rng       *rand.Rand
	// pending: outputs handed to the caller and not yet acknowledged
	// (evContinue); at maxAhead the request waits for its caller. ended:
	// the caller will stop at an output already handed to it (an end
	// token, the token limit, an error), so no step serves it again.
	pending int
	ended   bool
	// graced: a step served the request while its caller was maxAhead
	// outputs behind (its grace step, see maxOut); until the caller
	// catches up (pending < maxAhead) it sits out.
	graced bool
	// kept is 1 + the tokens the caller took (Result.CompletionTokens),
	// set before its evStop; 0: not known (the engine closed first). A
	// step may have run past a stop string the caller found (maxAhead):
	// FinishObserver learns only the kept tokens.
	kept    atomic.Int64
	stopIDs []int32    // the end tokens: Config.EOS and StopTokenIDs
	spec    *specState // nil: plain decoding
	// recompute: the KV was given back under memory pressure; recomputeCtx
	// (prompt + generated but the pending token) is prefilled again.
	recompute    bool
	recomputeCtx []int32
	preemptions  int
	lastStep     uint64 // scheduler step that last served the request
	finished     bool
	// submitted..first admission: the request's queue time (Result.QueueTime).
	submitted time.Time
	queue     time.Duration
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
	r := &request{ctx: ctx, req: req, maxNew: maxNew, out: make(chan stepOut, maxOut), released: make(chan struct{}), submitted: time.Now()}
	select {
	case e.events <- event{evSubmit, r}:
	case <-e.quit:
		return res, ErrClosed
	case <-ctx.Done():
		res.Finish = FinishCancelled
		return res, ctx.Err()
	}
	res, err := e.consume(ctx, r, emit)
	r.kept.Store(int64(res.CompletionTokens) + 1) // before evStop: release reads it
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
	res.QueueTime = r.queue
	if r.spec != nil {
		st := r.stats
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
func (r *request) cachedTokens() int { return r.cached }

// keptTokens is the generated tokens the caller took (all of them when
// unknown).
func (r *request) keptTokens() []int32 {
	if k := int(r.kept.Load()) - 1; k >= 0 && k < len(r.generated) {
		return r.generated[:k]
	}
	return r.generated
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

// The scheduler keeps two lists: waiting (submitted, or preempted, without
// KV) and running (holding KV). Admission is by KV demand: the head of the
// waiting list is admitted only when the blocks for its context plus one
// token and a watermark are available, so a running request keeps room to
// grow. When a step's tokens do not fit, the newest running request is
// preempted (its KV freed, recomputed later) and goes back to the front of
// the waiting list; the oldest requests therefore always progress, and
// preemption cannot loop. A request whose context cannot fit even in an
// empty pool fails with ErrKVExhausted.

func (e *Engine) loop() {
	defer close(e.done)
	var running, waiting []*request
	var stepNo uint64
	remove := func(list []*request, r *request) []*request {
		for i, a := range list {
			if a == r {
				return append(list[:i], list[i+1:]...)
			}
		}
		return list
	}
	count := func() {
		e.active.Store(int64(len(running) + len(waiting)))
		e.waiting.Store(int64(len(waiting)))
	}
	handle := func(ev event) {
		r := ev.r
		switch ev.kind {
		case evSubmit:
			e.nextID++
			r.id = e.nextID
			e.setup(r)
			if err := e.fits(r); err != nil {
				running = append(running, r) // released by its evStop
				e.fail(r, err)
				break
			}
			waiting = append(waiting, r)
		case evContinue:
			r.pending--
			if r.pending < maxAhead {
				r.graced = false
			}
			if r.spec != nil {
				r.spec.count(r, e, -1) // the caller took the whole output
			}
		case evStop:
			running = remove(running, r)
			waiting = remove(waiting, r)
			count() // before release: Generate returns once it is released
			e.release(r)
		}
		count()
	}
	defer func() {
		for _, r := range append(running, waiting...) {
			if !r.finished {
				e.release(r)
			}
		}
	}()
	for {
		running, waiting = e.admitWaiting(running, waiting)
		count()
		ready := e.readyList(running)
		if len(ready) == 0 {
			select {
			case ev := <-e.events:
				handle(ev)
			case <-e.quit:
				return
			}
			continue
		}
		// gather what arrived, without waiting: a request whose caller is
		// maxAhead outputs behind sits out this step (it keeps its KV) and
		// joins a later one once its caller catches up, so a slow caller
		// never delays the other requests' steps. When one is behind, the
		// scheduler yields its thread once so that callers ready to run can
		// acknowledge first (no wait: it does not block on any caller).
		yielded := false
	gather:
		for {
			select {
			case ev := <-e.events:
				handle(ev)
				continue
			case <-e.quit:
				return
			default:
			}
			if yielded || behind(running) == 0 {
				break gather
			}
			runtime.Gosched()
			yielded = true
		}
		running, waiting = e.admitWaiting(running, waiting)
		count()
		ready = e.readyList(running)
		if len(ready) == 0 {
			continue
		}
		if len(ready) > e.opts.MaxBatch {
			// least recently served first, so that no request starves.
			slices.SortStableFunc(ready, func(a, b *request) int { return cmp.Compare(a.lastStep, b.lastStep) })
			ready = ready[:e.opts.MaxBatch]
		}
		stepNo++
		e.steps.Add(1)
		for _, r := range ready {
			r.lastStep = stepNo
			if r.pending >= maxAhead {
				r.graced = true // its grace step: the next one it sits out
			}
		}
		var preempted []*request
		ready, preempted = e.makeRoom(ready, running)
		for _, r := range preempted {
			running = remove(running, r)
			// back to the front of the waiting list, oldest first
			at := 0
			for at < len(waiting) && waiting[at].admitted != 0 && waiting[at].admitted < r.admitted {
				at++
			}
			waiting = slices.Insert(waiting, at, r)
		}
		count()
		e.satOut.Add(int64(satOut(running, stepNo)))
		e.step(ready, len(running))
	}
}

// maxAhead is how many outputs a request's caller may have yet to
// acknowledge when a step serves it: with 2, a step runs while the caller
// turns the previous step's tokens into text and emits them (its
// acknowledgement, a round trip between goroutines, cost every step of a
// lone request ~30 µs on the H100 host when the step waited for it). The
// caller stops at an output the scheduler cannot foresee (a stop string, a
// failed emit) at most one step late (two after a grace step, maxOut);
// those steps' tokens are not emitted.
const maxAhead = 2

// maxOut is the most outputs a caller may have unacknowledged: a running
// request whose caller is maxAhead outputs behind is still served by one
// step, its grace step (graced), and sits out only when its caller is still
// behind at the next step. A caller behind only for a moment (its goroutine
// scheduled late) then keeps its place in the batches, while a caller that
// stays behind sits out every step but one (no step waits for it). With the
// bare maxAhead rule such a request left a batch and rejoined later, so the
// same tokens took more, smaller steps: on the shared 2-core VM, plain bench
// spec at concurrency 32 sat out up to 25 request-steps per run and took
// 66-72 steps where 66 suffice; with the grace step 0 and 66 (nothing sat out
// on the H100: docs/device-notes.md). After a grace step a stop string found
// by the caller costs at most two steps.
const maxOut = maxAhead + 1

// canServe reports whether a step may serve r (running, not finished, its
// caller not maxAhead outputs behind and not about to stop). Admission asks
// it; a running request may also have its grace step (servable).
func (r *request) canServe() bool { return !r.finished && !r.ended && r.pending < maxAhead }

// servable reports whether a step may serve the running request r: canServe,
// or its caller is just maxAhead outputs behind and r has not had its grace
// step since its caller was last caught up.
func (r *request) servable() bool {
	return r.canServe() || (!r.finished && !r.ended && r.pending == maxAhead && !r.graced)
}

// behind counts the running requests whose callers are maxAhead or more
// outputs behind (those that sit out and those that may still have their
// grace step).
func behind(running []*request) int {
	n := 0
	for _, r := range running {
		if !r.finished && !r.ended && r.pending >= maxAhead {
			n++
		}
	}
	return n
}

// satOut counts the running requests that step stepNo does not serve
// because their callers are behind.
func satOut(running []*request, stepNo uint64) int {
	n := 0
	for _, r := range running {
		if !r.finished && !r.ended && r.pending >= maxAhead && r.lastStep != stepNo {
			n++
		}
	}
	return n
}

func (e *Engine) readyList(running []*request) []*request {
	var out []*request
	for _, r := range running {
		if r.servable() {
			out = append(out, r)
		}
	}
	return out
}

// setup initialises a submitted request's sampling and speculation state.
func (e *Engine) setup(r *request) {
	r.sampler = r.req.Sampling
	r.stopIDs = append(slices.Clip(e.m.Config.EOS), r.req.StopTokenIDs...)
	r.rng = NewRand(r.req.Sampling.Seed)
	props := e.opts.Proposers
	if r.req.Proposers != nil {
		props = r.req.Proposers
	}
	if r.req.NoSpeculation || len(props) == 0 {
		return
	}
	r.spec = e.newSpecState(props, r.req.Typical)
	r.stats.Exact = true
	for _, p := range props {
		if s, ok := p.(Starter); ok {
			s.Start(r.id, r.req.Tenant, r.req.KnownDrafts)
		}
	}
}

// fits reports an error when the request's context plus one token cannot
// fit in the KV pool even when nothing else holds it.
func (e *Engine) fits(r *request) error {
	kv := e.m.kv
	if need := kv.BlocksFor(len(r.context()) + 1); need > kv.NumBlocks() {
		return fmt.Errorf("engine: the prompt needs %d KV blocks of %d tokens, the pool holds %d: %w",
			need, kv.BlockSize(), kv.NumBlocks(), ErrKVExhausted)
	}
	return nil
}

// watermark is the number of KV blocks admission leaves free for running
// requests to grow into.
func (e *Engine) watermark() int { return max(1, e.m.kv.NumBlocks()/50) }

// admitWaiting moves waiting requests, in order, to running while their KV
// demand fits (always the first one when nothing runs). A request that no
// step may serve yet (preempted while its caller is maxAhead outputs behind,
// or about to stop) is skipped, not waited for: it keeps its place at the
// front, so it is admitted before the requests after it once its caller
// catches up. A request that can be served but does not fit stops
// admission (first come, first served).
func (e *Engine) admitWaiting(running, waiting []*request) ([]*request, []*request) {
	kv := e.m.kv
	kept := waiting[:0]
	i := 0
	for ; i < len(waiting); i++ {
		r := waiting[i]
		if !r.canServe() {
			kept = append(kept, r) // its caller is behind, or stops
			continue
		}
		need := kv.BlocksFor(len(r.context()) + 1)
		if len(running) > 0 && kv.AvailableBlocks() < need+e.watermark() {
			break
		}
		e.admit(r)
		running = append(running, r)
	}
	kept = append(kept, waiting[i:]...)
	clear(waiting[len(kept):])
	return running, kept
}

// admit gives a request its sequence (reusing cached prefix blocks).
func (e *Engine) admit(r *request) {
	if r.admitted == 0 {
		r.queue = time.Since(r.submitted)
	}
	e.admitNo++
	r.admitted = e.admitNo
	ctxToks := r.context()
	r.seq, r.prefilled = e.m.NewCachedSequence(ctxToks, r.req.PrefixSalt)
	if !r.recompute {
		r.cached = r.prefilled
	}
}

// release frees a request's KV and proposer state (scheduler goroutine).
func (e *Engine) release(r *request) {
	if r.finished {
		return
	}
	r.finished = true
	if r.seq != nil {
		r.seq.Free()
	}
	var prompt []int32
	if r.spec != nil {
		prompt = slices.Clone(r.req.Prompt) // the caller owns req once Generate returns
		r.spec.countKept(r, e)              // before Generate reads r.stats
	}
	// the caller's Generate returns now: what the proposers learn from the
	// request (a tenant's answer indexed for suffix drafting: ~40 µs on
	// this VM) is no longer on its response's path. The scheduler does it
	// before it handles any later event, so the tenant's next request
	// still drafts from this answer.
	close(r.released)
	if r.spec != nil {
		for _, p := range r.spec.props {
			if fo, ok := p.(FinishObserver); ok && len(r.keptTokens()) > 0 {
				fo.Finished(r.id, r.req.Tenant, prompt, r.keptTokens())
			}
			p.Release(r.id)
		}
	}
}

// fail ends a request with err: the caller sees err, then hands the request back.
func (e *Engine) fail(r *request, err error) {
	e.handOut(r, stepOut{err: err})
}

// handOut gives r's caller a step's output (r.generated already holds its
// tokens). The caller stops at an error, an end token or the token limit;
// the scheduler sees those too and serves r no more (ended).
func (e *Engine) handOut(r *request, so stepOut) {
	if so.err != nil || len(r.generated) >= r.maxNew {
		r.ended = true
	} else {
		for _, t := range so.toks {
			if slices.Contains(r.stopIDs, t) {
				r.ended = true
				break
			}
		}
	}
	r.pending++
	if r.spec != nil {
		r.spec.handed(r, e)
	}
	r.out <- so
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

// demand is the number of new KV blocks a request needs for n more tokens.
func (e *Engine) demand(r *request, n int) int {
	kv := e.m.kv
	return max(kv.BlocksFor(r.seq.t.N+n)-len(r.seq.t.Blocks), 0)
}

// baseTokens is how many tokens a ready request forwards in this step
// without speculation: its next prefill chunk, or one decode token.
func (e *Engine) baseTokens(r *request) int {
	if ctxToks := r.context(); r.prefilled < len(ctxToks) {
		return min(e.opts.PrefillChunk, len(ctxToks)-r.prefilled)
	}
	return 1
}

// makeRoom preempts the newest running requests until the ready requests'
// tokens of this step fit in the KV pool. It returns the ready requests
// still to serve and the preempted ones. A request that does not fit even
// alone fails.
func (e *Engine) makeRoom(ready, running []*request) ([]*request, []*request) {
	kv := e.m.kv
	var preempted []*request
	for {
		need := 0
		for _, r := range ready {
			need += e.demand(r, e.baseTokens(r))
		}
		avail := kv.AvailableBlocks()
		if need <= avail {
			e.availBlocks = avail
			return ready, preempted
		}
		// the newest running request that is not already preempted
		var victim *request
		for _, r := range running {
			if r.seq == nil || slices.Contains(preempted, r) {
				continue
			}
			if victim == nil || r.admitted > victim.admitted {
				victim = r
			}
		}
		if victim == nil || (len(running)-len(preempted) == 1) {
			// alone and still too big: it can never finish.
			for _, r := range ready {
				if r == victim || victim == nil {
					e.fail(r, fmt.Errorf("engine: request needs more KV than the pool holds (%d blocks of %d tokens): %w",
						kv.NumBlocks(), kv.BlockSize(), ErrKVExhausted))
				}
			}
			out := ready[:0:0]
			for _, r := range ready {
				if r != victim && victim != nil {
					out = append(out, r)
				}
			}
			return out, preempted
		}
		e.preempt(victim)
		preempted = append(preempted, victim)
		ready = slices.DeleteFunc(slices.Clone(ready), func(r *request) bool { return r == victim })
	}
}

// preempt gives a running request's KV back (vLLM-style recompute
// preemption): it is recomputed from its context when it is admitted again.
func (e *Engine) preempt(r *request) {
	if len(r.generated) > 0 {
		ctxToks := make([]int32, 0, len(r.req.Prompt)+len(r.generated))
		ctxToks = append(ctxToks, r.req.Prompt...)
		ctxToks = append(ctxToks, r.generated[:len(r.generated)-1]...)
		r.recompute = true
		r.recomputeCtx = ctxToks
	}
	r.seq.Free()
	r.seq = nil
	r.prefilled = 0
	r.preemptions++
	e.preempted.Add(1)
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
	k := e.opts.DecodeSteps
	if r.spec != nil {
		// a speculative request whose drafts do not pay decodes like a plain
		// one until its proposers' next probe is due.
		if k = r.spec.dormantSteps(e.opts.FixedDraft); k <= 1 {
			return 0
		}
		k = min(k, e.opts.DecodeSteps)
	}
	sp := r.sampler
	if sp.Temperature > 0 || sp.PresencePenalty != 0 || sp.FrequencyPenalty != 0 || sp.Logprobs > 0 || !r.req.Sampling.SkipLogprobs {
		return 0
	}
	if _, ok := e.m.backend.(GreedyStepper); !ok {
		return 0
	}
	return min(k, r.maxNew-len(r.generated))
}

// stepItem is one request's part of a step's forward.
type stepItem struct {
	r       *request
	prefill bool      // a prompt (or recompute) chunk
	tree    *Proposal // verified draft tree below the pending token (nil: plain)
}

// step runs one scheduler step over ready requests: one batched target
// forward holding prefill chunks, plain decode tokens and every
// speculative request's draft tree, then sampling and tree verification.
// It returns the requests that were handed an output.
func (e *Engine) step(ready []*request, active int) []*request {
	tStep := time.Now()
	defer func() { e.stepNs.Add(int64(time.Since(tStep))) }()
	var items []BatchItem
	var plan []stepItem
	var decoding []*request // speculative requests decoding in this step
	var served []*request
	for _, r := range ready {
		if err := r.ctx.Err(); err != nil {
			e.fail(r, err)
			served = append(served, r)
			continue
		}
		if ctxToks := r.context(); r.prefilled < len(ctxToks) {
			end := min(r.prefilled+e.opts.PrefillChunk, len(ctxToks))
			it := BatchItem{Seq: r.seq, Tokens: ctxToks[r.prefilled:end]}
			if end == len(ctxToks) && !r.recompute {
				it.LogitsRows = []int32{int32(end - r.prefilled - 1)}
				it.WantHidden = r.spec != nil && r.spec.wantsHidden()
				e.deviceHeads(r, &it)
				if !it.WantHidden {
					it.Sample = e.rowSample(r) // the first token never has a draft
				}
			} else {
				it.LogitsRows = []int32{}
			}
			items = append(items, it)
			plan = append(plan, stepItem{r: r, prefill: true})
			continue
		}
		if k := e.greedySteps(r, len(ready), active); k > 1 {
			toks, err := r.seq.DecodeGreedy(r.generated[len(r.generated)-1], k)
			switch {
			case err == nil:
				r.generated = append(r.generated, toks...)
				e.generated.Add(int64(len(toks)))
				if r.spec != nil {
					r.spec.skipped(len(toks))
					r.stats.Forwards += len(toks) // one forward per token
				}
				e.handOut(r, stepOut{toks: toks})
				served = append(served, r)
				continue
			case !errors.Is(err, ErrKVExhausted) && !errors.Is(err, ErrContextLength):
				e.fail(r, fmt.Errorf("engine: multi-step decode: %w", err))
				served = append(served, r)
				continue
			}
			// no room for k tokens: one plain step
		}
		if r.spec != nil {
			decoding = append(decoding, r)
		}
		it := BatchItem{Seq: r.seq, Tokens: []int32{r.generated[len(r.generated)-1]}, WantHidden: r.spec != nil && r.spec.wantsHidden()}
		e.deviceHeads(r, &it)
		if r.spec == nil {
			it.Sample = e.rowSample(r)
		}
		items = append(items, it)
		plan = append(plan, stepItem{r: r})
	}
	if len(items) == 0 {
		return served
	}
	// draft trees for the speculative requests, within the step's budget.
	if len(decoding) > 0 {
		baseT := 0
		for _, it := range items {
			baseT += len(it.Tokens)
		}
		emit := 0
		for _, p := range plan {
			if !p.prefill {
				emit++
			}
		}
		tProp := time.Now()
		trees := e.propose(decoding, baseT, emit, len(ready))
		e.proposeNs.Add(int64(time.Since(tProp)))
		for i := range plan {
			t := trees[plan[i].r]
			if t == nil || t.Len() == 0 {
				if r := plan[i].r; r.spec != nil && !plan[i].prefill && !items[i].WantHidden {
					// no draft this step: sample like a plain request (on the device where it can)
					items[i].Sample = e.rowSample(r)
				}
				continue
			}
			plan[i].tree = t
			toks := make([]int32, 1+t.Len())
			par := make([]int32, 1+t.Len())
			toks[0], par[0] = items[i].Tokens[0], -1
			for j, tok := range t.Tokens {
				toks[j+1], par[j+1] = tok, t.Parents[j]+1
			}
			items[i].Tokens, items[i].Parents = toks, par
			e.argmaxOnly(plan[i].r, &items[i])
		}
	}
	t0 := time.Now()
	err := e.m.ForwardBatch(items)
	if err != nil && errors.Is(err, ErrKVExhausted) {
		// the trees did not fit: verify nothing this step.
		for i := range plan {
			if plan[i].tree != nil {
				plan[i].tree = nil
				items[i].Tokens, items[i].Parents = items[i].Tokens[:1], nil
				items[i].ArgmaxOnly = false
			}
		}
		err = e.m.ForwardBatch(items)
	}
	e.forwardNs.Add(int64(time.Since(t0)))
	e.forwards.Add(1)
	if err != nil {
		// isolate the failing request(s): forward one by one.
		for i := range items {
			if err := e.m.ForwardBatch(items[i : i+1]); err != nil {
				e.fail(plan[i].r, err)
				served = append(served, plan[i].r)
				plan[i].r = nil
			}
		}
	}
	tVerify := time.Now()
	for i, p := range plan {
		r := p.r
		if r == nil {
			continue
		}
		served = append(served, r)
		it := items[i]
		if p.prefill {
			r.prefilled += len(it.Tokens)
			if ctxToks := r.context(); r.prefilled < len(ctxToks) || r.recompute {
				if r.prefilled == len(ctxToks) {
					r.recompute = false
				}
				e.handOut(r, stepOut{}) // progress without a token: keeps cancellation checks per step
				continue
			}
		}
		if r.spec != nil && !p.prefill {
			r.stats.Forwards++ // a decode forward (the prefill's last chunk gives the first token)
		}
		if p.tree != nil {
			e.verify(r, p.tree, it)
			continue
		}
		if r.spec != nil {
			r.spec.hidden = append(r.spec.hidden[:0], it.Hidden...) // empty when not fetched
			r.spec.keepHeadTop(&it, 0)
		}
		if !e.sampledOnDevice(r, it) {
			e.sampleInto(r, it.Logits)
		}
	}
	e.verifyNs.Add(int64(time.Since(tVerify)))
	if err == nil {
		// the step's cost beyond proposing: forward, sampling, verification
		T := 0
		tree, heads := false, false
		for i, it := range items {
			T += len(it.Tokens)
			tree = tree || plan[i].tree != nil
			heads = heads || it.Heads > 0
		}
		secs := time.Since(t0).Seconds()
		if c, ok := e.fixedCost(T, tree, heads); ok {
			secs = c
		}
		e.costOf(tree, heads).observe(T, secs)
	}
	return served
}

func (e *Engine) sampleInto(r *request, logits []float32) {
	t := Sample(logits, r.sampler, r.generated, r.rng)
	r.generated = append(r.generated, t)
	e.generated.Add(1)
	so := stepOut{toks: []int32{t}}
	r.addLogprobs(&so, logits)
	e.handOut(r, so)
}

// addLogprobs fills so's logprobs (and top alternatives when asked) from
// rows ([len(so.toks)][VocabSize]): row i is the target's logits that
// predicted so.toks[i].
func (r *request) addLogprobs(so *stepOut, rows []float32) {
	if r.req.Sampling.SkipLogprobs && r.req.Sampling.Logprobs == 0 {
		return // the caller reports no logprobs: skip the softmax over the vocabulary
	}
	V := len(rows) / len(so.toks)
	for i, t := range so.toks {
		lp := LogSoftmax(rows[i*V : (i+1)*V])
		so.logprobs = append(so.logprobs, lp[t])
		if r.req.Sampling.Logprobs > 0 {
			so.top = append(so.top, TopLogprobs(lp, r.req.Sampling.Logprobs))
		}
	}
}

// verify resolves a speculative request's verified tree: it walks the
// tree (greedy or lossless sampling), keeps the accepted path's KV, and
// hands the accepted tokens plus the target's bonus token to the caller.
func (e *Engine) verify(r *request, t *Proposal, it BatchItem) {
	V, H := e.m.Config.VocabSize, e.m.Config.HiddenSize
	sp := r.spec
	var vd verdict
	if it.ArgmaxOnly {
		vd = verifyArgmax(t.Tokens, t.Parents, it.Argmax)
	} else {
		vd = verifyTree(t.Tokens, t.Parents, t.Q, it.Logits, V, r.sampler, r.generated, r.rng, sp.typical)
	}
	keep := make([]int, 0, 1+len(vd.path))
	keep = append(keep, 0)
	for _, n := range vd.path {
		keep = append(keep, n+1)
	}
	tKeep := time.Now()
	err := r.seq.KeepTree(keep)
	e.keepNs.Add(int64(time.Since(tKeep)))
	if err != nil {
		e.fail(r, fmt.Errorf("engine: keep accepted path: %w", err))
		return
	}
	toks := make([]int32, 0, len(vd.path)+1)
	for j, n := range vd.path {
		toks = append(toks, t.Tokens[n])
		_ = j
	}
	toks = append(toks, vd.bonus)
	var rows []float32 // the kept rows' logits, only where logprobs are reported (ArgmaxOnly: none)
	if sp := r.req.Sampling; !it.ArgmaxOnly && !(sp.SkipLogprobs && sp.Logprobs == 0) {
		rows = make([]float32, 0, len(keep)*V)
		for _, k := range keep {
			rows = append(rows, it.Logits[k*V:(k+1)*V]...)
		}
	}
	sp.hidden = sp.hidden[:0]
	if it.WantHidden {
		last := keep[len(keep)-1]
		sp.hidden = append(sp.hidden, it.Hidden[last*H:(last+1)*H]...)
	}
	sp.keepHeadTop(&it, keep[len(keep)-1])
	// never more than the request may still take (the consumer stops at maxNew).
	r.generated = append(r.generated, toks...)
	e.generated.Add(int64(len(toks)))
	e.specSteps.Add(1)
	e.specBudget.Add(int64(t.Len())) // here, not when granted: a full KV pool drops a step's trees (step)
	sp.record(r, t, vd, e)
	so := stepOut{toks: toks}
	r.addLogprobs(&so, rows)
	e.handOut(r, so)
}
