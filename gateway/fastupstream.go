package gateway

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
)

// errFastTransport wraps fasthttp's errors.
var errFastTransport = errors.New("upstream transport")

// Buffered (non-streaming) upstream calls go straight to fasthttp's client
// (doFast): the request is written and the answer read in the calling
// goroutine, on pooled connections with pooled buffers, and the client's
// body is sent without a copy. net/http's Transport hands every request to
// two goroutines per connection (writeLoop, readLoop) and back, which cost
// more than the rest of the proxy path (docs/cache.md, "Hot paths").
// Streams keep net/http (upstream.do): they relay as they read. Calls
// through Options.UpstreamTransport (tests) use upstream.do too.
//
// One difference: fasthttp cannot abort a request in flight when the
// client hangs up; the call then ends at the upstream's answer or at the
// upstream timeout, and its result is dropped (no retry follows).

func newFastClient(maxBody int) *fasthttp.Client {
	return &fasthttp.Client{
		Name:                      "specgate",
		NoDefaultUserAgentHeader:  true,
		MaxConnsPerHost:           1024,
		MaxIdemponentCallAttempts: 1, // doFast owns retries
		RetryIf:                   func(*fasthttp.Request) bool { return false },
		// Idle connections are closed after 4 s, below common server
		// keep-alive timeouts (Node 5 s, nginx 75 s): net/http silently
		// retries a request whose reused connection the server had closed,
		// fasthttp (retries off, doFast owns them) would fail it.
		MaxIdleConnDuration:           4 * time.Second,
		MaxResponseBodySize:           maxBody,
		DisableHeaderNamesNormalizing: false,
		DisablePathNormalizing:        true,
		Dial:                          (&fasthttp.TCPDialer{Concurrency: 0, DNSCacheDuration: time.Minute}).Dial,
	}
}

// fastCall is a buffered upstream call made directly on the fasthttp
// client, without net/http's request and response types: the request
// is built from the client's (its body is the client's body, not a copy),
// sent and read in the calling goroutine, and the answer stays in
// fasthttp's pooled response until release. The policy is upstream.do's:
// retries with backoff for connection errors and 5xx statuses, the timeout
// bounding all attempts and backoff together, the same metrics and errors.
//
// Its only per-request timer is the lazy hang-up watch's: no contexts
// derived from the server's (each costs a registration under the parent's
// lock), no header or idle timers (the fasthttp client reads the whole
// answer within the deadline).
type fastCall struct {
	resp *fasthttp.Response
}

// release returns the response to fasthttp's pool; its body is invalid
// afterwards.
func (f *fastCall) release() {
	if f.resp != nil {
		fasthttp.ReleaseResponse(f.resp)
		f.resp = nil
	}
}

// doFast sends body to path with u's policy. gone reports a client that
// hung up and stop the server shutting down; both end the retries (an
// attempt in flight cannot be aborted). hdr sets the forwarded headers.
func (u *upstream) doFast(stop context.Context, gone func() bool, path string, body []byte, hdr func(*fasthttp.RequestHeader), met *metrics) (*fastCall, error) {
	deadline := time.Now().Add(u.cfg.Timeout)
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	req.SetRequestURI(u.baseStr + path)
	req.Header.SetMethod(http.MethodPost)
	req.Header.SetContentType("application/json")
	hdr(&req.Header)
	if u.key != "" {
		req.Header.Set("Authorization", "Bearer "+u.key)
	}
	req.SetBodyRaw(body)
	resp := fasthttp.AcquireResponse()
	timedOut := func(last error) (*fastCall, error) {
		fasthttp.ReleaseResponse(resp)
		return nil, &upstreamErr{name: u.cfg.Name, timeout: true,
			err: fmt.Errorf("no response within %s (timeout; last error: %w)", u.cfg.Timeout, last)}
	}
	for attempt := 0; ; attempt++ {
		if err := stop.Err(); err != nil {
			fasthttp.ReleaseResponse(resp)
			return nil, u.fail(err)
		}
		err := u.fast.DoDeadline(req, resp, deadline)
		switch {
		case errors.Is(err, fasthttp.ErrBodyTooLarge):
			met.upstreamOutcome(u.cfg.Name, "error").Inc()
			fasthttp.ReleaseResponse(resp)
			return nil, u.fail(fmt.Errorf("response exceeds %d bytes", maxUpstreamBody))
		case err == nil && resp.StatusCode() < 500:
			met.upstreamOutcome(u.cfg.Name, statusClass(resp.StatusCode())).Inc()
			return &fastCall{resp: resp}, nil
		}
		var last error
		if err != nil {
			met.upstreamOutcome(u.cfg.Name, "error").Inc()
			if errors.Is(err, fasthttp.ErrTimeout) || !time.Now().Before(deadline) {
				return timedOut(err)
			}
			last = fmt.Errorf("%w: %w", errFastTransport, err)
		} else {
			met.upstreamOutcome(u.cfg.Name, statusClass(resp.StatusCode())).Inc()
			last = fmt.Errorf("status %d", resp.StatusCode())
		}
		if attempt >= u.cfg.Retries || gone() {
			if err == nil {
				// The last answer is a 5xx: the client gets it as it is.
				return &fastCall{resp: resp}, nil
			}
			fasthttp.ReleaseResponse(resp)
			return nil, u.fail(last)
		}
		met.upstreamTry.WithLabelValues(u.cfg.Name).Inc()
		delay := u.cfg.Backoff << attempt
		if delay > 10*time.Second {
			delay = 10 * time.Second
		}
		delay += time.Duration(rand.Int64N(int64(delay)/4 + 1))
		t := time.NewTimer(min(delay, time.Until(deadline)))
		select {
		case <-stop.Done():
			t.Stop()
			fasthttp.ReleaseResponse(resp)
			return nil, u.fail(last)
		case <-t.C:
		}
		if !time.Now().Before(deadline) {
			return timedOut(last)
		}
		resp.Reset()
	}
}

// statusClass is "2xx", "4xx", ... for the upstream metrics.
func statusClass(code int) string {
	switch code / 100 {
	case 1:
		return "1xx"
	case 2:
		return "2xx"
	case 3:
		return "3xx"
	case 4:
		return "4xx"
	case 5:
		return "5xx"
	}
	return strconv.Itoa(code/100) + "xx"
}

// fastHeaders sets the client headers passed on to upstreams (the same
// set as forwardHeaders).
func fastHeaders(c *fiber.Ctx) func(*fasthttp.RequestHeader) {
	return func(h *fasthttp.RequestHeader) {
		if a := c.Request().Header.Peek(fiber.HeaderAccept); len(a) > 0 {
			h.SetBytesV(fiber.HeaderAccept, a)
		}
		if id, ok := c.Locals(localRequestID).(string); ok {
			h.Set("X-Request-ID", id)
		}
		for _, k := range []string{"OpenAI-Organization", "OpenAI-Project"} {
			if v := c.Request().Header.Peek(k); len(v) > 0 {
				h.SetBytesV(k, v)
			}
		}
	}
}

// upstreamOutcome is the specgate_upstream_requests_total counter of one
// upstream and outcome ("2xx", …, "error").
func (m *metrics) upstreamOutcome(name, outcome string) prometheus.Counter {
	return m.upstreamReqs.WithLabelValues(name, outcome)
}
