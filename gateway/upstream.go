package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"
)

// maxUpstreamBody bounds a buffered (non-streaming) upstream response.
const maxUpstreamBody = 64 << 20

// upstream is one OpenAI-compatible server.
type upstream struct {
	cfg     UpstreamConfig
	base    *url.URL
	key     string
	baseStr string
	client  *http.Client     // streams, and every call through Options.UpstreamTransport
	fast    *fasthttp.Client // buffered calls (fastupstream.go); nil with a custom transport
}

func newUpstream(cfg UpstreamConfig, getenv func(string) string, rt http.RoundTripper) (*upstream, error) {
	base, err := url.Parse(strings.TrimRight(cfg.BaseURL, "/"))
	if err != nil {
		return nil, fmt.Errorf("%w: upstreams %s base_url: %w", ErrConfig, cfg.Name, err)
	}
	u := &upstream{cfg: cfg, base: base, baseStr: base.String()}
	if cfg.APIKeyEnv != "" {
		u.key = getenv(cfg.APIKeyEnv)
	}
	if rt == nil {
		u.fast = newFastClient(maxUpstreamBody)
		rt = &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        4096,
			MaxIdleConnsPerHost: 1024,
			IdleConnTimeout:     90 * time.Second,
			ForceAttemptHTTP2:   true,
		}
	}
	u.client = &http.Client{Transport: rt}
	return u, nil
}

func (u *upstream) url(path string) string {
	return u.baseStr + path
}

// retryable reports whether an attempt may be repeated: connection errors
// and 5xx statuses, never a cancelled request.
func retryable(resp *http.Response, err error) bool {
	if err != nil {
		return !errors.Is(err, context.Canceled)
	}
	return resp.StatusCode >= 500
}

// The upstream timeout policy, the same for JSON and streams:
//
//   - timeout (upstreams[].timeout) bounds the time until the upstream
//     answers, once for the whole request: connection, retries and backoff
//     included. A stream has answered when its response headers arrive; a
//     JSON answer (read whole by the buffered client) when its body is in;
//   - idle_timeout (upstreams[].idle_timeout) then bounds every wait for the
//     next bytes of a stream (and of a JSON body read through a custom
//     Options.UpstreamTransport).
var (
	errHeaderTimeout = errors.New("no response headers in time")
	errIdleTimeout   = errors.New("no data in time")
)

// upstreamErr is an upstream failure: it wraps ErrUpstream and the real
// cause, and its message names the upstream once.
type upstreamErr struct {
	name    string
	timeout bool  // a timeout of the policy above
	err     error // the cause
}

func (e *upstreamErr) Error() string   { return "gateway: upstream " + e.name + ": " + e.err.Error() }
func (e *upstreamErr) Unwrap() []error { return []error{ErrUpstream, e.err} }

func (u *upstream) fail(err error) error {
	return &upstreamErr{name: u.cfg.Name, err: err}
}

// do sends one request with retries and exponential backoff (plus jitter)
// until a response that is not retryable, the retries are spent, ctx ends
// or the timeout for the response headers passes. The returned body is
// bounded by the idle timeout between reads; the caller closes it.
func (u *upstream) do(parent context.Context, method, path string, body []byte, hdr http.Header, met *metrics) (*http.Response, error) {
	ctx, cancel := context.WithCancelCause(parent)
	headerTimer := time.AfterFunc(u.cfg.Timeout, func() { cancel(errHeaderTimeout) })
	failed := func(err error) (*http.Response, error) {
		headerTimer.Stop()
		cause := context.Cause(ctx)
		if dl, ok := ctx.Deadline(); ok && cause == nil && !time.Now().Before(dl) {
			cause = errHeaderTimeout // the socket deadline passed before the context's timer fired
		}
		cancel(nil)
		if errors.Is(cause, errHeaderTimeout) {
			return nil, &upstreamErr{name: u.cfg.Name, timeout: true,
				err: fmt.Errorf("no response within %s (timeout; last error: %w)", u.cfg.Timeout, err)}
		}
		return nil, u.fail(err)
	}
	var lastErr error
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, method, u.url(path), bytes.NewReader(body))
		if err != nil {
			return failed(err)
		}
		for k, vs := range hdr {
			req.Header[k] = vs
		}
		if u.key != "" {
			req.Header.Set("Authorization", "Bearer "+u.key)
		}
		resp, err := u.client.Do(req)
		if !retryable(resp, err) || attempt >= u.cfg.Retries || ctx.Err() != nil {
			if err != nil {
				met.upstreamReqs.WithLabelValues(u.cfg.Name, "error").Inc()
				return failed(err)
			}
			met.upstreamReqs.WithLabelValues(u.cfg.Name, strconv.Itoa(resp.StatusCode/100)+"xx").Inc()
			if !headerTimer.Stop() {
				resp.Body.Close()
				return failed(fmt.Errorf("status %d after the deadline", resp.StatusCode))
			}
			resp.Body = newIdleBody(resp.Body, u.cfg.IdleTimeout, ctx, cancel)
			return resp, nil
		}
		if err != nil {
			lastErr = err
			met.upstreamReqs.WithLabelValues(u.cfg.Name, "error").Inc()
		} else {
			lastErr = fmt.Errorf("status %d", resp.StatusCode)
			met.upstreamReqs.WithLabelValues(u.cfg.Name, strconv.Itoa(resp.StatusCode/100)+"xx").Inc()
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
		}
		met.upstreamTry.WithLabelValues(u.cfg.Name).Inc()
		delay := u.cfg.Backoff << attempt
		if delay > 10*time.Second {
			delay = 10 * time.Second
		}
		delay += time.Duration(rand.Int64N(int64(delay)/4 + 1))
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return failed(lastErr)
		case <-t.C:
		}
	}
}

// idleBody is an upstream body whose every Read must return within d; a
// stalled read cancels the request (cause errIdleTimeout). Close ends the
// request's context.
type idleBody struct {
	rc     io.ReadCloser
	d      time.Duration
	ctx    context.Context
	cancel context.CancelCauseFunc
	timer  *time.Timer
}

func newIdleBody(rc io.ReadCloser, d time.Duration, ctx context.Context, cancel context.CancelCauseFunc) *idleBody {
	b := &idleBody{rc: rc, d: d, ctx: ctx, cancel: cancel}
	if d > 0 {
		b.timer = time.AfterFunc(d, func() { cancel(errIdleTimeout) })
		b.timer.Stop()
	}
	return b
}

func (b *idleBody) Read(p []byte) (int, error) {
	if b.timer != nil {
		b.timer.Reset(b.d)
	}
	n, err := b.rc.Read(p)
	if b.timer != nil {
		b.timer.Stop()
	}
	if err != nil && err != io.EOF && errors.Is(context.Cause(b.ctx), errIdleTimeout) {
		err = fmt.Errorf("%w: nothing for %s (idle_timeout)", errIdleTimeout, b.d)
	}
	return n, err
}

func (b *idleBody) Close() error {
	if b.timer != nil {
		b.timer.Stop()
	}
	err := b.rc.Close()
	b.cancel(nil)
	return err
}

// withModel rewrites the body's "model" to target when the client used an
// alias; otherwise the body is returned untouched.
func withModel(body []byte, requested, target string) ([]byte, error) {
	if requested == target {
		return body, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, err
	}
	m["model"], _ = json.Marshal(target)
	return json.Marshal(m)
}

// forwardHeaders are the client headers passed on to upstreams.
func forwardHeaders(c *fiber.Ctx) http.Header {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	if a := c.Get(fiber.HeaderAccept); a != "" {
		h.Set("Accept", a)
	}
	if id, ok := c.Locals(localRequestID).(string); ok {
		h.Set("X-Request-ID", id)
	}
	for _, k := range []string{"OpenAI-Organization", "OpenAI-Project"} {
		if v := c.Get(k); v != "" {
			h.Set(k, v)
		}
	}
	return h
}
