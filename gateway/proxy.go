package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/specgate/specgate/cache"
)

// proxyChat forwards a chat request to an upstream through the response
// cache (when the body parses; cachefront.go): looked up, then the entry's
// flight, then the upstream; a stream is teed into the cache. The body is
// forwarded as sent.
func (s *Server) proxyChat(c *fiber.Ctx, ur *upstreamRoute, body []byte, head modelOnly) error {
	stream := head.Stream != nil && *head.Stream
	if s.cache == nil {
		return s.proxy(c, ur, "/chat/completions", body, stream, nil)
	}
	req := head.whole // decoded by the handler (decodeChat)
	if req == nil {
		// Only the upstream can judge this body: forwarded, not cached.
		return s.proxy(c, ur, "/chat/completions", body, stream, nil)
	}
	cr := upstreamCacheRequest(c, body, head.Model, req, stream)
	if stream {
		return s.proxyChatStream(c, ur, body, cr, req.StreamOptions != nil && req.StreamOptions.IncludeUsage != nil && *req.StreamOptions.IncludeUsage)
	}
	res := reservationOf(c)
	l, store, err := s.cacheLookup(s.baseCtx, cr)
	if err != nil && !cacheSkipped(err) {
		s.logger(c).Warn("cache lookup failed", "err", err)
	}
	setCacheHeaders(c, l)
	if l.Hit {
		return s.upstreamHit(c, l)
	}
	fl, leader := s.joinFlight(l, cr)
	if !leader {
		shared, ok, err := s.waitFlight(c, fl)
		if errors.Is(err, errClientLeft) {
			return nil
		} else if err != nil {
			return err
		}
		if ok {
			if n, ok := usedTokens(shared); ok {
				res.settle(n)
			} else if res != nil {
				res.settle(res.n)
			}
			c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
			return c.Status(http.StatusOK).Send(shared)
		}
		fl = nil // the leader failed or its client left: forward ourselves
	}
	st, ct, b, release, err := s.forwardBuffered(c, ur, "/chat/completions", body)
	defer release()
	settleBuffered(res, st, b)
	if err != nil {
		fl.finish(nil, false)
		return s.upstreamError(c, ur, err)
	}
	if cost, ok := cacheableChat(st, b); ok {
		s.storeAnswer(fl, store, bytes.Clone(b), cost)
	} else {
		fl.finish(nil, false) // not cacheable; the client gets the upstream's answer
	}
	if ct == "" {
		ct = fiber.MIMEApplicationJSON
	}
	c.Set(fiber.HeaderContentType, ct)
	c.Status(st)
	c.Response().SetBody(b) // a copy into fiber's response buffer
	return nil
}

// cacheableChat reports whether an upstream's buffered answer to a chat
// request may be stored and shared: status 200 and a well-formed
// chat.completion (object "chat.completion", at least one choice, every
// choice with a message object). A 200 carrying an error JSON, an HTML
// page or anything else is relayed to its own client only: stored, it
// would answer every later identical request of its namespace. cost is the
// answer's completion tokens.
func cacheableChat(status int, b []byte) (cost float64, ok bool) {
	if status != http.StatusOK {
		return 0, false
	}
	var a struct {
		Object  string `json:"object"`
		Choices []struct {
			Message json.RawMessage `json:"message"`
		} `json:"choices"`
		Usage Usage `json:"usage"`
	}
	if json.Unmarshal(b, &a) != nil || a.Object != "chat.completion" || len(a.Choices) == 0 {
		return 0, false
	}
	for _, ch := range a.Choices {
		if m := bytes.TrimSpace(ch.Message); len(m) == 0 || m[0] != '{' {
			return 0, false
		}
	}
	return float64(a.Usage.CompletionTokens), true
}

// waitFlight waits for the leader of fl; ok is false when the leader had
// no answer. It stops early when the client hangs up or the server shuts
// down: err is then what to return to fiber (nil for a client that left).
func (s *Server) waitFlight(c *fiber.Ctx, fl *streamFlight) (body []byte, ok bool, err error) {
	ctx, cancel := context.WithCancel(s.baseCtx)
	defer cancel()
	watch := watchConnLazily(c.Context().Conn(), cancel)
	body, ok = fl.wait(ctx)
	watch.stop()
	switch {
	case ok:
	case s.baseCtx.Err() != nil:
		err = errUnavailable("The server is shutting down.", 0)
	case ctx.Err() != nil:
		reservationOf(c).settle(0) // the client left: nothing was used
		return nil, false, errClientLeft
	}
	return body, ok, err
}

// errClientLeft stops a handler whose client hung up while it waited.
var errClientLeft = errors.New("gateway: client left")

// upstreamHit answers an upstream JSON request from the cache: the stored
// answer with its own id, a fresh created time and cached_tokens.
func (s *Server) upstreamHit(c *fiber.Ctx, l cache.Lookup) error {
	res := reservationOf(c)
	v := viewOf(l)
	switch {
	case v != nil && v.usage != nil:
		res.settle(v.usage.TotalTokens)
	default:
		if n, ok := usedTokens(l.Response); ok {
			res.settle(n)
		} else if res != nil {
			res.settle(res.n)
		}
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	c.Status(http.StatusOK)
	if v != nil {
		id := v.storedID
		if id == "" {
			id = newCompletionID(endpointChat)
		}
		v.body.write(c, id, time.Now().Unix())
		return nil
	}
	var id string
	var m map[string]json.RawMessage
	if json.Unmarshal(l.Response, &m) == nil {
		_ = json.Unmarshal(m["id"], &id)
	}
	if id == "" {
		id = newCompletionID(endpointChat)
	}
	out, _ := rewriteCached(l.Response, id, time.Now().Unix(), true)
	return c.Send(out)
}

// proxyChatStream serves a streamed upstream chat request from the cache
// when it hits with an answer a stream can replay, else forwards it, teed
// into the cache.
func (s *Server) proxyChatStream(c *fiber.Ctx, ur *upstreamRoute, body []byte, cr *cache.Request, includeUsage bool) error {
	l, store, err := s.cacheLookup(s.baseCtx, cr)
	if err != nil && !cacheSkipped(err) {
		s.logger(c).Warn("cache lookup failed", "err", err)
	}
	if l.Hit && !plainChat(l.Response) {
		// Stored from a JSON answer a stream replay would not reproduce
		// (tool calls, logprobs, …): the upstream answers this one, and it
		// is not stored over the entry.
		c.Set(cache.HeaderCache, headerBypass)
		c.Set(headerBypassReason, "not-replayable")
		return s.proxy(c, ur, "/chat/completions", body, true, nil)
	}
	setCacheHeaders(c, l)
	if !l.Hit {
		// A cacheable miss joins its entry's flight (cachefront.go):
		// identical concurrent requests, streamed or not, share one
		// upstream call; followers replay the leader's answer (a JSON
		// leader's only when a stream can reproduce it).
		tee := &streamTee{save: store}
		fl, leader := s.joinFlight(l, cr)
		if !leader {
			shared, ok, err := s.waitFlight(c, fl)
			if errors.Is(err, errClientLeft) {
				return nil
			} else if err != nil {
				return err
			}
			if ok && plainChat(shared) {
				return s.replayUpstreamSSE(c, shared, false, includeUsage)
			}
			// The leader failed, its client left, or its answer cannot be
			// replayed as a stream: forward ourselves.
		} else {
			tee.flight = fl
		}
		return s.proxy(c, ur, "/chat/completions", body, true, tee)
	}
	if v := viewOf(l); v != nil {
		if t, ok := v.sseFor(includeUsage); ok {
			settleUsage(reservationOf(c), v.usage)
			setSSEHeaders(c)
			t.write(c, newCompletionID(endpointChat), time.Now().Unix())
			return nil
		}
	}
	return s.replayUpstreamSSE(c, l.Response, true, includeUsage)
}

// replayUpstreamSSE streams a stored (hit) or shared answer to an upstream
// chat stream request.
func (s *Server) replayUpstreamSSE(c *fiber.Ctx, stored []byte, hit, includeUsage bool) error {
	id, created := newCompletionID(endpointChat), time.Now().Unix()
	out, usage := rewriteCached(stored, id, created, hit)
	settleUsage(reservationOf(c), usage)
	setSSEHeaders(c)
	c.Context().SetBodyStreamWriter(func(w *bufio.Writer) {
		writeReplay(w, out, usage, id, created, includeUsage, true)
	})
	return nil
}

// settleUsage settles a reservation with a replayed answer's usage.
func settleUsage(res *reservation, u *Usage) {
	if u != nil {
		res.settle(u.TotalTokens)
		return
	}
	res.settle(0)
}

type upstreamStatus struct {
	status int
	ctype  string
	body   []byte
}

func (e *upstreamStatus) Error() string { return fmt.Sprintf("upstream status %d", e.status) }

func (s *Server) upstreamError(c *fiber.Ctx, ur *upstreamRoute, err error) error {
	s.logger(c).Warn("upstream failed", "upstream", ur.up.cfg.Name, "err", err)
	var ue *upstreamErr
	cause := err
	timeout := errors.Is(err, context.DeadlineExceeded)
	if errors.As(err, &ue) {
		cause, timeout = ue.err, timeout || ue.timeout
	}
	if timeout {
		return &APIError{Status: http.StatusGatewayTimeout, Type: "server_error", Code: "upstream_timeout",
			Message: fmt.Sprintf("Upstream %s did not answer in time: %v", ur.up.cfg.Name, cause)}
	}
	return &APIError{Status: http.StatusBadGateway, Type: "server_error", Code: "upstream_error",
		Message: fmt.Sprintf("Upstream %s failed: %v", ur.up.cfg.Name, cause)}
}

// forwardBuffered sends body and reads the whole answer (bounded). The
// answer's body is valid until release is called (the fasthttp client's
// pooled response); release is never nil.
func (s *Server) forwardBuffered(c *fiber.Ctx, ur *upstreamRoute, path string, body []byte) (status int, ctype string, b []byte, release func(), err error) {
	noop := func() {}
	out, err := withModel(body, c.Locals(localModel).(string), ur.target)
	if err != nil {
		return 0, "", nil, noop, err
	}
	if ur.up.fast != nil {
		// A hang-up matters only where it ends the retries: doFast asks
		// then (peerClosed: a peek, no watcher goroutine or timer per
		// request).
		conn := c.Context().Conn()
		gone := func() bool { return peerClosed(conn) }
		fc, err := ur.up.doFast(s.baseCtx, gone, path, out, fastHeaders(c), s.met)
		if err != nil {
			return 0, "", nil, noop, err
		}
		return fc.resp.StatusCode(), string(fc.resp.Header.ContentType()), fc.resp.Body(), fc.release, nil
	}
	ctx, cancel := context.WithCancel(s.baseCtx)
	defer cancel()
	watch := watchConnLazily(c.Context().Conn(), func() { cancel() })
	defer watch.stop()
	resp, err := ur.up.do(ctx, http.MethodPost, path, out, forwardHeaders(c), s.met)
	if err != nil {
		return 0, "", nil, noop, err
	}
	defer resp.Body.Close()
	b, err = io.ReadAll(io.LimitReader(resp.Body, maxUpstreamBody+1))
	if err != nil {
		return 0, "", nil, noop, &upstreamErr{name: ur.up.cfg.Name, timeout: errors.Is(err, errIdleTimeout), err: fmt.Errorf("reading the body: %w", err)}
	}
	if len(b) > maxUpstreamBody {
		return 0, "", nil, noop, ur.up.fail(fmt.Errorf("response exceeds %d bytes", maxUpstreamBody))
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), b, noop, nil
}

// reserveUpstream takes a proxied request's tokens from the caller's
// tokens-per-minute budget before it is forwarded: a prompt estimate (a
// token per 4 bytes of the body, which overestimates) plus max_tokens (or
// the upstream's default_max_tokens) per choice. The reservation is kept
// in the request's locals and settled with the upstream's usage.
// The fields come from the handler's one decode of the body (modelOnly),
// kept raw there so that a bad value is the upstream's to reject.
func (s *Server) reserveUpstream(c *fiber.Ctx, ur *upstreamRoute, body []byte, head *modelOnly) error {
	maxTok := ur.up.cfg.DefaultMaxTokens
	vTok, vCompl, vN, okTok, okCompl, okN := head.tokenFields()
	if okCompl && vCompl > 0 {
		maxTok = vCompl
	}
	if okTok && vTok > 0 {
		maxTok = vTok
	}
	n := 1
	if okN && vN > 1 {
		n = min(vN, 128)
	}
	res, err := s.reserveTokens(c, len(body)/4+n*maxTok)
	if err != nil {
		return err
	}
	c.Locals(localReservation, res)
	return nil
}

// rawInt reads a raw JSON value as an int (ok = false: absent, null or
// not an integer that fits).
func rawInt(raw json.RawMessage) (int, bool) {
	if len(raw) == 0 || raw[0] == 'n' {
		return 0, false
	}
	var v int
	if json.Unmarshal(raw, &v) != nil {
		return 0, false
	}
	return v, true
}

func reservationOf(c *fiber.Ctx) *reservation {
	r, _ := c.Locals(localReservation).(*reservation)
	return r
}

// usedTokens reads usage.total_tokens of an upstream JSON answer (ok =
// false when it has none).
func usedTokens(body []byte) (int, bool) {
	var u struct {
		Usage *Usage `json:"usage"`
	}
	if json.Unmarshal(body, &u) != nil || u.Usage == nil {
		return 0, false
	}
	return u.Usage.TotalTokens, true
}

// settleBuffered settles a buffered upstream answer: nothing for a failure
// or a non-200 status, the reported usage when there is one, else the
// whole reservation.
func settleBuffered(res *reservation, status int, body []byte) {
	if res == nil {
		return
	}
	if status != http.StatusOK {
		res.settle(0)
		return
	}
	if n, ok := usedTokens(body); ok {
		res.settle(n)
		return
	}
	res.settle(res.n)
}

// proxy forwards body to the upstream at path and relays the answer:
// buffered, or (stream) relayed event by event as it arrives. Retries
// happen only before any byte reached the client. A stream with a cache
// request (tee, its lookup missed) is teed into the cache: its chunks are
// assembled into the chat completion they add up to (chatAssembler), which
// is stored and handed to the requests waiting on its flight.
func (s *Server) proxy(c *fiber.Ctx, ur *upstreamRoute, path string, body []byte, stream bool, tee *streamTee) error {
	if stream {
		return s.proxyStream(c, ur, path, body, tee)
	}
	res := reservationOf(c)
	st, ct, b, release, err := s.forwardBuffered(c, ur, path, body)
	defer release()
	settleBuffered(res, st, b)
	if err != nil {
		return s.upstreamError(c, ur, err)
	}
	if ct == "" {
		ct = fiber.MIMEApplicationJSON
	}
	c.Set(fiber.HeaderContentType, ct)
	c.Status(st)
	c.Response().SetBody(b) // a copy into fiber's response buffer
	return nil
}

// proxyStream forwards a streaming request and relays the upstream's
// stream event by event (teed into the cache when tee is set).
func (s *Server) proxyStream(c *fiber.Ctx, ur *upstreamRoute, path string, body []byte, tee *streamTee) error {
	res := reservationOf(c)
	out, err := withModel(body, c.Locals(localModel).(string), ur.target)
	if err != nil {
		res.settle(0)
		tee.fail()
		return errInvalid("", "invalid_json", "We could not parse the JSON body of your request: %v", err)
	}
	ctx, cancel := context.WithCancel(s.baseCtx)
	watch := watchConn(c.Context().Conn(), cancel)
	s.inflight.Add(1)
	resp, err := ur.up.do(ctx, http.MethodPost, path, out, forwardHeaders(c), s.met)
	if err != nil {
		watch.stop()
		cancel()
		s.inflight.Done()
		res.settle(0)
		tee.fail()
		return s.upstreamError(c, ur, err)
	}
	if resp.StatusCode != http.StatusOK {
		tee.fail()
		defer resp.Body.Close()
		defer s.inflight.Done()
		defer cancel()
		defer watch.stop()
		res.settle(0)
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxUpstreamBody))
		c.Set(fiber.HeaderContentType, resp.Header.Get("Content-Type"))
		return c.Status(resp.StatusCode).Send(b)
	}
	ct := resp.Header.Get("Content-Type")
	if ct != "" {
		c.Set(fiber.HeaderContentType, ct)
	} else {
		setSSEHeaders(c)
	}
	c.Set(fiber.HeaderCacheControl, "no-cache")
	log := s.logger(c)
	name := ur.up.cfg.Name
	sse := ct == "" || strings.HasPrefix(strings.ToLower(ct), "text/event-stream")
	prompt := len(body) / 4
	c.Context().SetBodyStreamWriter(func(cw *bufio.Writer) {
		defer s.inflight.Done()
		defer watch.stop()
		defer cancel()
		defer resp.Body.Close()
		// The relay (and so the flight it leads) runs at the upstream's
		// pace, not the client's (decouple.go).
		writeDecoupled(cw, func(w *bufio.Writer) { s.relayUpstream(w, resp, tee, res, ctx, cancel, log, name, sse, prompt) })
	})
	return nil
}

// relayUpstream relays an upstream's stream to w (proxyStream's writer),
// settling res and ending tee's flight.
func (s *Server) relayUpstream(w *bufio.Writer, resp *http.Response, tee *streamTee, res *reservation, ctx context.Context, cancel func(), log *slog.Logger, name string, sse bool, prompt int) {
	if !sse {
		tee.fail()
		n, err := copyStream(w, resp.Body, cancel)
		if err != nil && ctx.Err() == nil {
			log.Warn("upstream stream broke", "upstream", name, "bytes", n, "err", err)
		}
		res.settle(prompt + int(n/4))
		return
	}
	var asm *chatAssembler
	var onData func([]byte)
	if tee != nil {
		asm = &chatAssembler{}
		onData = asm.add
	}
	r := relaySSE(w, resp.Body, onData)
	switch {
	case r.usage != nil:
		res.settle(r.usage.TotalTokens)
	default:
		// No usage chunk (stream_options.include_usage unset): about one
		// token per content event.
		res.settle(prompt + r.events)
	}
	if r.done && !r.clientGone {
		tee.store(s, asm)
	} else {
		tee.fail()
	}
	if r.clientGone || r.done {
		return
	}
	// The upstream stream broke (reset, cut before [DONE], or stalled
	// past idle_timeout): tell the client instead of ending a clean 200.
	ae := streamBroken(name, r, ctx)
	log.Warn("upstream stream broke", "upstream", name, "events", r.events, "err", ae.Message)
	sw := &sseWriter{w: w}
	sw.event(ae)
	sw.done()
}

// streamBroken is the error event for an upstream stream that ended
// without [DONE].
func streamBroken(name string, r relayResult, ctx context.Context) *APIError {
	ae := &APIError{Status: http.StatusBadGateway, Type: "server_error", Code: "upstream_error"}
	switch {
	case r.err == nil:
		ae.Message = fmt.Sprintf("Upstream %s ended the stream before [DONE].", name)
	case errors.Is(r.err, errIdleTimeout):
		ae.Status, ae.Code = http.StatusGatewayTimeout, "upstream_timeout"
		ae.Message = fmt.Sprintf("Upstream %s stalled: %v.", name, r.err)
	case ctx.Err() != nil:
		ae.Status, ae.Code = http.StatusServiceUnavailable, "service_unavailable"
		ae.Message = "The server is shutting down; the stream was cancelled."
	default:
		ae.Message = fmt.Sprintf("Upstream %s stream broke: %v.", name, r.err)
	}
	return ae
}

// upstreamCacheRequest is the cache's view of an upstream chat request: the
// normalised messages (normalize.go), and everything else that can change
// the answer in the namespace, as compact JSON: all fields but the messages
// (the key), temperature (its own part of the namespace), model, user and
// the stream flags (a JSON answer and a stream share entries).
func upstreamCacheRequest(c *fiber.Ctx, body []byte, model string, req *ChatCompletionRequest, stream bool) *cache.Request {
	noCache, noStore := cacheControl(c)
	temp := 1.0
	if req.Temperature != nil {
		temp = *req.Temperature
	}
	var params map[string]json.RawMessage
	_ = json.Unmarshal(body, &params)
	cr := &cache.Request{Tenant: tenantOf(c), Model: model, Temperature: temp, NoCache: noCache, NoStore: noStore,
		Stream: stream, Params: map[string]string{"endpoint": "chat"}}
	for k, v := range params {
		switch k {
		case "messages", "temperature", "model", "user", "stream", "stream_options":
		default:
			var b bytes.Buffer
			if json.Compact(&b, v) == nil {
				cr.Params[k] = b.String()
			} else {
				cr.Params[k] = string(v)
			}
		}
	}
	setCacheMessages(cr, normalizeChat(req.Messages))
	return cr
}
