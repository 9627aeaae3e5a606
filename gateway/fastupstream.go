package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// Buffered (non-streaming) upstream calls go through fastTransport, an
// http.RoundTripper over fasthttp's client: the request is written and the
// answer read in the calling goroutine, on pooled connections with pooled
// buffers. net/http's Transport hands every request to two goroutines per
// connection (writeLoop, readLoop) and back, which cost more than the rest
// of the proxy path (docs/cache.md, "Hot paths"). Streams keep net/http:
// they relay as they read. Retries, status handling and metrics stay in
// upstream.do, which sees an ordinary *http.Response either way.
//
// One difference: fasthttp cannot abort a request in flight when its
// context is cancelled (the client hung up); the call then ends at the
// upstream's answer or at the context's deadline (the upstream timeout), and
// its result is dropped.

type bufferedKey struct{}

// withBuffered marks ctx as a buffered upstream call (upstream.do picks the
// buffered client for it).
func withBuffered(ctx context.Context) context.Context {
	return context.WithValue(ctx, bufferedKey{}, true)
}

// clientFor returns the HTTP client for a call: the buffered one when ctx is
// marked and one is set.
func (u *upstream) clientFor(ctx context.Context) *http.Client {
	if u.buffered != nil && ctx.Value(bufferedKey{}) != nil {
		return u.buffered
	}
	return u.client
}

type fastTransport struct {
	c *fasthttp.Client
}

func newFastTransport(maxBody int) *fastTransport {
	return &fastTransport{c: &fasthttp.Client{
		Name:                      "specgate",
		NoDefaultUserAgentHeader:  true,
		MaxConnsPerHost:           1024,
		MaxIdemponentCallAttempts: 1, // upstream.do owns retries
		RetryIf:                   func(*fasthttp.Request) bool { return false },
		// Idle connections are closed after 4 s, below common server
		// keep-alive timeouts (Node 5 s, nginx 75 s): net/http silently
		// retries a request whose reused connection the server had closed,
		// fasthttp (retries off, upstream.do owns them) would fail it.
		MaxIdleConnDuration:           4 * time.Second,
		MaxResponseBodySize:           maxBody,
		DisableHeaderNamesNormalizing: false,
		DisablePathNormalizing:        true,
		Dial:                          (&fasthttp.TCPDialer{Concurrency: 0, DNSCacheDuration: time.Minute}).Dial,
	}}
}

// fastBody is the response body: fasthttp's pooled response, released on Close.
type fastBody struct {
	r    *bytes.Reader
	resp *fasthttp.Response
	once sync.Once
}

func (b *fastBody) Read(p []byte) (int, error) { return b.r.Read(p) }
func (b *fastBody) Close() error {
	b.once.Do(func() { fasthttp.ReleaseResponse(b.resp) })
	return nil
}

// errFastTransport wraps fasthttp's errors.
var errFastTransport = errors.New("upstream transport")

func (t *fastTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	req.SetRequestURI(r.URL.String())
	req.Header.SetMethod(r.Method)
	for k, vs := range r.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	if r.Body != nil {
		if _, err := io.Copy(req.BodyWriter(), r.Body); err != nil {
			return nil, fmt.Errorf("%w: reading request body: %w", errFastTransport, err)
		}
		_ = r.Body.Close()
	}
	ctx := r.Context()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	resp := fasthttp.AcquireResponse()
	var err error
	if dl, ok := ctx.Deadline(); ok {
		err = t.c.DoDeadline(req, resp, dl)
	} else {
		err = t.c.Do(req, resp)
	}
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		// Not retryable: the body read fails, as net/http's bounded read does.
		fasthttp.ReleaseResponse(resp)
		return &http.Response{Status: "200 OK", StatusCode: http.StatusOK, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{}, Body: io.NopCloser(errReader{fmt.Errorf("%w: response exceeds %d bytes", errFastTransport, t.c.MaxResponseBodySize)}),
			ContentLength: -1, Request: r}, nil
	}
	if err != nil {
		fasthttp.ReleaseResponse(resp)
		if cerr := ctx.Err(); cerr != nil {
			// The deadline passed or the caller cancelled: report it as
			// net/http would (upstreamError maps DeadlineExceeded to 504).
			return nil, cerr
		}
		if errors.Is(err, fasthttp.ErrTimeout) {
			return nil, fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
		}
		return nil, fmt.Errorf("%w: %w", errFastTransport, err)
	}
	h := make(http.Header, resp.Header.Len())
	resp.Header.VisitAll(func(k, v []byte) {
		h[string(k)] = append(h[string(k)], string(v))
	})
	body := resp.Body()
	return &http.Response{
		Status:        fmt.Sprintf("%d %s", resp.StatusCode(), http.StatusText(resp.StatusCode())),
		StatusCode:    resp.StatusCode(),
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          &fastBody{r: bytes.NewReader(body), resp: resp},
		ContentLength: int64(len(body)),
		Request:       r,
	}, nil
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }
