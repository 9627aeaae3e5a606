package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/specgate/specgate/cache"
	"github.com/specgate/specgate/engine"
)

const systemFingerprint = "fp_specgate"

func newCompletionID(ep endpoint) string {
	if ep == endpointChat {
		return randomID("chatcmpl-")
	}
	return randomID("cmpl-")
}

// chatCacheRequest builds the cache's view of a chat request (nil: caching
// off for it).
func (s *Server) chatCacheRequest(c *fiber.Ctx, r *ChatCompletionRequest, j *job) *cache.Request {
	if s.cache == nil {
		return nil
	}
	noCache, noStore := cacheControl(c)
	cr := &cache.Request{Tenant: tenantOf(c), Model: r.Model, Stream: j.stream, NoCache: noCache, NoStore: noStore,
		Temperature: float64(j.gen.Sampling.Temperature), Params: commonCacheParams(j)}
	cr.Params["endpoint"] = "chat"
	setCacheMessages(cr, j.chat)
	return cr
}

// completionCacheRequest builds the cache's view of a completion request:
// only single text prompts are cached (the prompt is the key text).
func (s *Server) completionCacheRequest(c *fiber.Ctx, r *CompletionRequest, j *job) *cache.Request {
	if s.cache == nil || r.Prompt == nil || len(r.Prompt.Texts) != 1 {
		return nil
	}
	noCache, noStore := cacheControl(c)
	cr := &cache.Request{Tenant: tenantOf(c), Model: r.Model, Stream: j.stream, NoCache: noCache, NoStore: noStore,
		Temperature: float64(j.gen.Sampling.Temperature), Params: commonCacheParams(j),
		Messages: []cache.Message{{Role: "user", Content: r.Prompt.Texts[0]}}}
	cr.Params["endpoint"] = "completions"
	cr.Params["echo"] = strconv.FormatBool(j.echo[0] != "")
	return cr
}

// commonCacheParams are the output-changing parameters hashed into the namespace.
func commonCacheParams(j *job) map[string]string {
	sp := j.gen.Sampling
	p := map[string]string{
		"max_tokens": strconv.Itoa(j.gen.MaxTokens),
		"n":          strconv.Itoa(j.n),
		"top_p":      strconv.FormatFloat(float64(sp.TopP), 'g', -1, 32),
		"presence":   strconv.FormatFloat(float64(sp.PresencePenalty), 'g', -1, 32),
		"frequency":  strconv.FormatFloat(float64(sp.FrequencyPenalty), 'g', -1, 32),
		"logprobs":   strconv.FormatBool(j.logprobs) + "/" + strconv.Itoa(j.topLogprobs),
	}
	if len(j.gen.Stop) > 0 {
		b, _ := json.Marshal(j.gen.Stop)
		p["stop"] = string(b)
	}
	if j.seed != nil {
		p["seed"] = strconv.FormatInt(*j.seed, 10)
	}
	return p
}

// genOutcome is what a finished generation left behind.
type genOutcome struct {
	acc     []*choiceAcc
	results []engine.Result
	err     error
	errIdx  int
	first   time.Time // when the first chunk arrived (zero: none)
}

// collect runs every choice to the end and accumulates it.
func collect(ctx context.Context, gen engine.Generator, j *job) genOutcome {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	out := genOutcome{acc: make([]*choiceAcc, j.choices()), results: make([]engine.Result, j.choices())}
	for i := range out.acc {
		out.acc[i] = &choiceAcc{}
	}
	if j.choices() == 1 {
		// One choice: generated in this goroutine, its chunks accumulated
		// as the engine hands them over (no goroutine, channel or hand-off
		// between the last chunk and the response).
		outs := launchPrep(ctx, j)
		acc := out.acc[0]
		res, err := runChoice(ctx, gen, j, 0, outs, func(c engine.Chunk) error {
			if out.first.IsZero() {
				out.first = time.Now()
			}
			acc.add(c)
			return nil
		})
		out.results[0], acc.res, acc.finished = res, res, true
		if err != nil {
			out.err = err
		}
		return out
	}
	events, left := launch(ctx, gen, j), j.choices()
	for left > 0 {
		// Not ranged to the channel's close: that comes from another
		// goroutine after the last choice's end, one more hand-off
		// before the response.
		ev, ok := <-events
		if !ok {
			break
		}
		if !ev.done {
			if out.first.IsZero() {
				out.first = time.Now()
			}
			out.acc[ev.idx].add(ev.chunk)
			continue
		}
		left--
		out.results[ev.idx] = ev.res
		out.acc[ev.idx].res = ev.res
		out.acc[ev.idx].finished = true
		if ev.err != nil && out.err == nil {
			out.err, out.errIdx = ev.err, ev.idx
			cancel(ev.err)
		}
	}
	return out
}

// render builds the non-streaming response body.
func (j *job) render(id string, created int64, o genOutcome) ([]byte, *Usage) {
	usage := usageOf(j, o.results)
	if j.ep == endpointChat {
		resp := ChatCompletion{ID: id, Object: "chat.completion", Created: created, Model: j.model.Name,
			SystemFingerprint: systemFingerprint, Usage: usage}
		for i, a := range o.acc {
			ch := ChatChoice{Index: i, Message: AssistantMsg{Role: "assistant", Content: a.text.String()}, FinishReason: finishString(a.res.Finish)}
			if j.logprobs {
				ch.Logprobs = chatLogprobs(a.tokens, a.top)
			}
			resp.Choices = append(resp.Choices, ch)
		}
		b, _ := json.Marshal(resp)
		return b, usage
	}
	ub, _ := json.Marshal(usage)
	resp := Completion{ID: id, Object: "text_completion", Created: created, Model: j.model.Name,
		SystemFingerprint: systemFingerprint, Usage: ub}
	for i, a := range o.acc {
		fr := finishString(a.res.Finish)
		echo := j.echo[i/j.n]
		ch := CompletionChoice{Text: echo + a.text.String(), Index: i, FinishReason: &fr}
		if j.logprobs {
			ch.Logprobs = completionLogprobs(a.tokens, a.top, len(echo))
		}
		resp.Choices = append(resp.Choices, ch)
	}
	b, _ := json.Marshal(resp)
	return b, usage
}

// runState is what a local generation needs after its handler returned
// (streams run after the handler, in fasthttp's body writer).
type runState struct {
	s       *Server
	j       *job
	id      string
	created int64
	log     *slog.Logger // nil until logger() is called
	reqID   string
	res     *reservation // tokens reserved at admission; settled by finish
	start   time.Time
	creq    *cache.Request
}

// finish records metrics, settles the key's token reservation and logs.
func (r *runState) finish(usage *Usage, outcome string, ttft time.Duration) {
	m := r.j.model.Name
	met := r.s.met
	met.genReqOf.of([2]string{m, outcome}).Inc()
	if outcome == "disconnected" {
		met.disconnects.Inc()
	}
	// Tokens are counted once, by the request that generated them: cache
	// hits and shared (single-flight) answers replay tokens generated by
	// another request.
	if generated := outcome != "cache_hit" && outcome != "shared"; usage != nil && generated {
		met.tokens.WithLabelValues(m, "prompt").Add(float64(usage.PromptTokens))
		met.tokens.WithLabelValues(m, "completion").Add(float64(usage.CompletionTokens))
		if usage.PromptTokensDetails != nil {
			met.tokens.WithLabelValues(m, "cached_prompt").Add(float64(usage.PromptTokensDetails.CachedTokens))
		}
		if sp := usage.Speculative; sp != nil {
			met.specSteps.WithLabelValues(m).Add(float64(sp.Steps))
			met.specProposed.WithLabelValues(m).Add(float64(sp.Proposed))
			met.specAccepted.WithLabelValues(m).Add(float64(sp.Accepted))
			for src, su := range sp.BySource {
				met.specSource.WithLabelValues(m, src, "proposed").Add(float64(su.Proposed))
				met.specSource.WithLabelValues(m, src, "accepted").Add(float64(su.Accepted))
			}
		}
	}
	used := 0
	if usage != nil {
		used = usage.TotalTokens
	}
	r.res.settle(used)
	e2e := time.Since(r.start)
	if ttft == 0 && (outcome == "cache_hit" || outcome == "shared") {
		ttft = e2e // the whole answer arrives at once
	}
	if ttft > 0 {
		src := "engine"
		switch outcome {
		case "cache_hit":
			src = "cache"
		case "shared":
			src = "shared"
		}
		met.ttftOf.of([2]string{m, src}).Observe(ttft.Seconds())
	}
	met.lat.finished(m, outcome, usage, e2e, ttft)
	if !r.s.log.Enabled(context.Background(), slog.LevelInfo) {
		return
	}
	// The same line as logger().Info("generation", …) writes, without
	// cloning a logger per request or boxing every value.
	attrs := make([]slog.Attr, 0, 14)
	attrs = append(attrs, slog.String("request_id", r.reqID), slog.String("model", m), slog.String("tenant", r.j.tenant),
		slog.String("outcome", outcome), slog.Bool("stream", r.j.stream), slog.Int("n", r.j.n),
		slog.Float64("duration_ms", float64(time.Since(r.start).Microseconds())/1000))
	if usage != nil {
		cached := 0
		if usage.PromptTokensDetails != nil {
			cached = usage.PromptTokensDetails.CachedTokens
		}
		attrs = append(attrs, slog.Int("prompt_tokens", usage.PromptTokens), slog.Int("completion_tokens", usage.CompletionTokens),
			slog.Int("cached_tokens", cached))
		if usage.Speculative != nil {
			attrs = append(attrs, slog.Float64("spec_acceptance", usage.Speculative.AcceptanceRate))
		}
	}
	if r.j.user != nil {
		attrs = append(attrs, slog.String("user", logString(*r.j.user)))
	}
	r.s.log.LogAttrs(context.Background(), slog.LevelInfo, "generation", attrs...)
}

// logger is the request's logger (built on first use: most requests only
// log their one summary line, which finish writes directly).
func (r *runState) logger() *slog.Logger {
	if r.log == nil {
		r.log = r.s.log.With("request_id", r.reqID)
	}
	return r.log
}

func paramOf(j *job) string {
	if j.ep == endpointChat {
		return "messages"
	}
	return "prompt"
}

// runLocal serves a validated job: from the cache when it hits, otherwise
// from the engine, as JSON or as an SSE stream.
func (s *Server) runLocal(c *fiber.Ctx, j *job, creq *cache.Request) error {
	rs := &runState{s: s, j: j, id: newCompletionID(j.ep), created: time.Now().Unix(), start: time.Now(), creq: creq}
	rs.reqID, _ = c.Locals(localRequestID).(string)
	res, err := s.reserveTokens(c, j.reserveTokens())
	if err != nil {
		return err
	}
	rs.res = res
	// The cache first: a hit is answered before a generation's context,
	// hang-up watch and in-flight count exist (a lookup is not cancelled
	// by a hang-up, as on the upstream path).
	var l cache.Lookup
	var store answerStore
	if creq != nil {
		var err error
		l, store, err = s.cacheLookup(s.baseCtx, creq)
		if err != nil && !cacheSkipped(err) {
			rs.logger().Warn("cache lookup failed", "err", err)
		}
		setCacheHeaders(c, l)
		if l.Hit {
			return s.serveHit(c, rs, l)
		}
	}
	j.obs = s.met.lat.observer(j.model.Name) // token timings of the generation
	ctx, cancel := context.WithCancelCause(s.baseCtx)
	watch := watchConnLazily(c.Context().Conn(), func() { cancel(ErrClientGone) })
	s.inflight.Add(1)
	if !j.stream {
		defer s.inflight.Done()
		defer cancel(nil)
		defer watch.stop()
		return s.runJSON(c, ctx, rs, l, store)
	}
	var flight *streamFlight
	if creq != nil {
		// A cacheable miss joins its entry's flight (cachefront.go):
		// identical concurrent requests, streamed or not, share one
		// generation; followers replay the leader's answer.
		var leader bool
		if flight, leader = s.joinFlight(l, creq); !leader {
			body, ok := flight.wait(ctx)
			flight = nil
			if ok {
				watch.stop()
				cancel(nil)
				s.inflight.Done()
				return s.replaySSE(c, rs, body, false)
			}
			if ctx.Err() != nil {
				watch.stop()
				s.inflight.Done()
				rs.finish(nil, "disconnected", 0)
				return nil
			}
			// The leader failed or its client left: generate ourselves.
		}
	}
	events := launch(ctx, j.model.Generator, j)
	first, ok := <-events
	if ok && first.done && first.err != nil {
		cancel(first.err)
		for range events {
		}
		watch.stop()
		s.inflight.Done()
		flight.finish(nil, false)
		if errors.Is(first.err, ErrClientGone) || errors.Is(context.Cause(ctx), ErrClientGone) {
			// The client left during prefill: not an engine error.
			rs.finish(nil, "disconnected", 0)
			return nil
		}
		rs.finish(nil, "error", 0)
		return engineError(first.err, paramOf(j))
	}
	ttft := time.Since(rs.start)
	setSSEHeaders(c)
	c.Context().SetBodyStreamWriter(func(cw *bufio.Writer) {
		defer s.inflight.Done()
		defer watch.stop()
		defer cancel(nil)
		// The engine's events (and so the flight this stream leads) are
		// consumed at the engine's pace, not the client's (decouple.go).
		writeDecoupled(cw, func(w *bufio.Writer) {
			sw := &sseWriter{w: w, onFail: func() { cancel(ErrClientGone) }}
			st := newLocalStream(rs, sw)
			left := j.choices()
			if ok {
				st.handle(first)
				if first.done {
					left--
				}
			}
			for left > 0 { // not ranged to the close: as in collect
				ev, ok := <-events
				if !ok {
					break
				}
				st.handle(ev)
				if ev.done {
					left--
				}
			}
			usage, outcome := st.end(context.Cause(ctx))
			rs.finish(usage, outcome, ttft)
			if outcome != "ok" || creq == nil {
				flight.finish(nil, false)
				return
			}
			body, _ := j.render(rs.id, rs.created, genOutcome{acc: st.acc, results: st.results})
			s.storeAnswer(flight, store, body, float64(usage.CompletionTokens))
		})
	})
	return nil
}

// setCacheHeaders sets what l.Headers() lists, without building the map.
//
// A lookup the request itself ruled out says X-Cache: BYPASS and why in
// X-Cache-Bypass-Reason: no-cache (Cache-Control), temperature (sampled
// requests are not cached unless the tenant allows it), empty or too-large
// (no usable key text).
func setCacheHeaders(c *fiber.Ctx, l cache.Lookup) {
	if !l.Hit {
		switch l.Reason {
		case "no-cache", "temperature", "empty", "too-large":
			c.Set(cache.HeaderCache, headerBypass)
			c.Set(headerBypassReason, l.Reason)
			return
		}
	}
	c.Set(cache.HeaderCache, l.XCache())
	if l.Hit {
		c.Set(cache.HeaderCacheSimilarity, l.XCacheSimilarity())
	}
}

const (
	headerBypass       = "BYPASS"
	headerBypassReason = "X-Cache-Bypass-Reason"
)

func setSSEHeaders(c *fiber.Ctx) {
	c.Set(fiber.HeaderContentType, "text/event-stream; charset=utf-8")
	c.Set(fiber.HeaderCacheControl, "no-cache")
	c.Set(fiber.HeaderConnection, "keep-alive")
	c.Set("X-Accel-Buffering", "no")
}

// serveHit answers a local request from the cache (l is a hit): the
// pre-rendered body or replay with this request's id and time.
func (s *Server) serveHit(c *fiber.Ctx, rs *runState, l cache.Lookup) error {
	j := rs.j
	v := viewOf(l)
	if !j.stream {
		if v != nil {
			// Pre-rendered: fill in this request's id and time.
			rs.finish(v.usage, "cache_hit", 0)
			c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
			v.body.write(c, rs.id, rs.created)
			return nil
		}
		body, usage := rewriteCached(l.Response, rs.id, rs.created, true)
		rs.finish(usage, "cache_hit", 0)
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
		return c.Send(body)
	}
	if v != nil {
		if t, ok := v.sseFor(j.includeUsage); ok {
			rs.finish(v.usage, "cache_hit", 0)
			setSSEHeaders(c)
			t.write(c, rs.id, rs.created)
			return nil
		}
	}
	return s.replaySSE(c, rs, l.Response, true)
}

// runJSON serves a non-streaming local request whose lookup (l, store;
// zero without a cache request) missed.
func (s *Server) runJSON(c *fiber.Ctx, ctx context.Context, rs *runState, l cache.Lookup, store answerStore) error {
	j := rs.j
	var usage *Usage
	var ttft time.Duration
	gen := func(ctx context.Context) ([]byte, float64, error) {
		o := collect(ctx, j.model.Generator, j)
		if !o.first.IsZero() {
			ttft = o.first.Sub(rs.start)
		}
		if o.err != nil {
			return nil, 0, o.err
		}
		var body []byte
		body, usage = j.render(rs.id, rs.created, o)
		return body, float64(usage.CompletionTokens), nil
	}
	var fl *streamFlight // the flight this request leads (nil: none)
	if rs.creq != nil {
		var leader bool
		if fl, leader = s.joinFlight(l, rs.creq); !leader {
			shared, ok := fl.wait(ctx)
			fl = nil
			switch {
			case ok:
				body, usage := rewriteCached(shared, rs.id, rs.created, false)
				rs.finish(usage, "shared", 0)
				c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
				return c.Send(body)
			case ctx.Err() != nil:
				rs.finish(nil, "disconnected", 0)
				return nil
			}
			// The leader failed or its client left: generate ourselves.
		}
	}
	body, cost, err := gen(ctx)
	if err != nil {
		fl.finish(nil, false)
	} else if rs.creq != nil {
		s.storeAnswer(fl, store, body, cost)
	}
	if err != nil {
		if cause := context.Cause(ctx); errors.Is(cause, ErrClientGone) {
			rs.finish(nil, "disconnected", ttft)
			rs.logger().Info("client disconnected; generation cancelled")
			return nil
		}
		rs.finish(nil, "error", ttft)
		return engineError(err, paramOf(j))
	}
	rs.finish(usage, "ok", ttft)
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(body)
}

// rewriteCached gives a stored response a fresh id and created time. On a
// cache hit every prompt token counts as cached and no speculation ran.
// Responses of local models keep their field order (they decode into our
// types); others (upstreams) go through a map so no field is lost.
func rewriteCached(body []byte, id string, created int64, hit bool) ([]byte, *Usage) {
	fix := func(u *Usage) {
		if u == nil || !hit {
			return
		}
		if u.PromptTokensDetails == nil {
			u.PromptTokensDetails = &PromptTokensDetails{}
		}
		u.PromptTokensDetails.CachedTokens = u.PromptTokens
		u.Speculative = nil
	}
	var probe struct {
		Object            string `json:"object"`
		SystemFingerprint string `json:"system_fingerprint"`
	}
	if json.Unmarshal(body, &probe) == nil && probe.SystemFingerprint == systemFingerprint {
		switch probe.Object {
		case "chat.completion":
			var r ChatCompletion
			if json.Unmarshal(body, &r) == nil {
				r.ID, r.Created = id, created
				fix(r.Usage)
				out, _ := json.Marshal(r)
				return out, r.Usage
			}
		case "text_completion":
			var r Completion
			if json.Unmarshal(body, &r) == nil {
				r.ID, r.Created = id, created
				var u *Usage
				if len(r.Usage) > 0 {
					u = &Usage{}
					if json.Unmarshal(r.Usage, u) != nil {
						u = nil
					} else {
						fix(u)
						r.Usage, _ = json.Marshal(u)
					}
				}
				out, _ := json.Marshal(r)
				return out, u
			}
		}
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return body, nil
	}
	m["id"], _ = json.Marshal(id)
	m["created"], _ = json.Marshal(created)
	var u *Usage
	if raw, ok := m["usage"]; ok {
		u = &Usage{}
		if json.Unmarshal(raw, u) == nil {
			fix(u)
			m["usage"], _ = json.Marshal(u)
		} else {
			u = nil
		}
	}
	out, err := json.Marshal(m)
	if err != nil {
		return body, u
	}
	return out, u
}

// streamFlights lets identical concurrent misses, streamed or not, local
// or upstream, share one generation (cachefront.go).
type streamFlights struct {
	mu        sync.Mutex
	m         map[string]*streamFlight
	followers int // joins of a running flight, ever (tests wait on it)
}

// streamFlight is one shared generation. body is valid after done closes.
type streamFlight struct {
	fs   *streamFlights
	key  string
	done chan struct{}
	once sync.Once
	body []byte
	ok   bool
}

// join returns the flight for key, creating it (leader = true) when none runs.
func (f *streamFlights) join(key string) (*streamFlight, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[string]*streamFlight{}
	}
	if fl, ok := f.m[key]; ok {
		f.followers++
		return fl, false
	}
	fl := &streamFlight{fs: f, key: key, done: make(chan struct{})}
	f.m[key] = fl
	return fl, true
}

// finish publishes the leader's response (ok = false: followers generate
// themselves) and ends the flight. Safe on a nil flight and more than once.
func (fl *streamFlight) finish(body []byte, ok bool) {
	if fl == nil {
		return
	}
	fl.once.Do(func() {
		fl.fs.mu.Lock()
		delete(fl.fs.m, fl.key)
		fl.fs.mu.Unlock()
		fl.body, fl.ok = body, ok
		close(fl.done)
	})
}

// wait blocks until the leader finished or ctx ends.
func (fl *streamFlight) wait(ctx context.Context) ([]byte, bool) {
	select {
	case <-fl.done:
		return fl.body, fl.ok
	case <-ctx.Done():
		return nil, false
	}
}
