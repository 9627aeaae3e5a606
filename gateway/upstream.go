package gateway

import (
	"bufio"
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

	"github.com/specgate/specgate/cache"
)

// maxUpstreamBody bounds a buffered (non-streaming) upstream response.
const maxUpstreamBody = 64 << 20

// upstream is one OpenAI-compatible server.
type upstream struct {
	cfg      UpstreamConfig
	base     *url.URL
	key      string
	client   *http.Client
	buffered *http.Client // buffered calls (fastupstream.go); nil = client
}

func newUpstream(cfg UpstreamConfig, getenv func(string) string, rt http.RoundTripper) (*upstream, error) {
	base, err := url.Parse(strings.TrimRight(cfg.BaseURL, "/"))
	if err != nil {
		return nil, fmt.Errorf("%w: upstreams %s base_url: %w", ErrConfig, cfg.Name, err)
	}
	u := &upstream{cfg: cfg, base: base}
	if cfg.APIKeyEnv != "" {
		u.key = getenv(cfg.APIKeyEnv)
	}
	if rt == nil {
		u.buffered = &http.Client{Transport: newFastTransport(maxUpstreamBody)}
		rt = &http.Transport{
			Proxy:                 nil,
			DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:          4096,
			MaxIdleConnsPerHost:   1024,
			IdleConnTimeout:       90 * time.Second,
			ResponseHeaderTimeout: cfg.Timeout,
			ForceAttemptHTTP2:     true,
		}
	}
	u.client = &http.Client{Transport: rt}
	return u, nil
}

func (u *upstream) url(path string) string {
	return u.base.String() + path
}

// retryable reports whether an attempt may be repeated: connection errors
// and 5xx statuses, never a cancelled request.
func retryable(resp *http.Response, err error) bool {
	if err != nil {
		return !errors.Is(err, context.Canceled)
	}
	return resp.StatusCode >= 500
}

// do sends one request with retries and exponential backoff (plus jitter)
// until a response that is not retryable, the retries are spent, or ctx ends.
// The caller closes the returned body.
func (u *upstream) do(ctx context.Context, method, path string, body []byte, hdr http.Header, met *metrics) (*http.Response, error) {
	var lastErr error
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, method, u.url(path), bytes.NewReader(body))
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrUpstream, u.cfg.Name, err)
		}
		for k, vs := range hdr {
			req.Header[k] = vs
		}
		if u.key != "" {
			req.Header.Set("Authorization", "Bearer "+u.key)
		}
		resp, err := u.clientFor(ctx).Do(req)
		if !retryable(resp, err) || attempt >= u.cfg.Retries || ctx.Err() != nil {
			if err != nil {
				met.upstreamReqs.WithLabelValues(u.cfg.Name, "error").Inc()
				return nil, fmt.Errorf("%w: %s: %w", ErrUpstream, u.cfg.Name, err)
			}
			met.upstreamReqs.WithLabelValues(u.cfg.Name, strconv.Itoa(resp.StatusCode/100)+"xx").Inc()
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
			return nil, fmt.Errorf("%w: %s: %w (last: %v)", ErrUpstream, u.cfg.Name, ctx.Err(), lastErr)
		case <-t.C:
		}
	}
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

// proxyChat forwards a chat request to an upstream; non-streaming requests
// whose body parses go through the response cache.
func (s *Server) proxyChat(c *fiber.Ctx, ur *upstreamRoute, body []byte, head modelOnly) error {
	stream := head.Stream != nil && *head.Stream
	if s.cache == nil || stream {
		return s.proxy(c, ur, "/chat/completions", body, stream)
	}
	var req ChatCompletionRequest
	if decodeJSON(body, &req) != nil {
		return s.proxy(c, ur, "/chat/completions", body, false)
	}
	noCache, noStore := cacheControl(c)
	temp := 1.0
	if req.Temperature != nil {
		temp = *req.Temperature
	}
	// Everything but the messages and temperature goes into the namespace.
	var params map[string]json.RawMessage
	_ = json.Unmarshal(body, &params)
	cr := &cache.Request{Tenant: tenantOf(c), Model: head.Model, Temperature: temp, NoCache: noCache, NoStore: noStore,
		Params: map[string]string{"endpoint": "chat"}}
	for k, v := range params {
		if k != "messages" && k != "temperature" && k != "model" && k != "user" {
			cr.Params[k] = string(v)
		}
	}
	var sys []string
	for _, m := range req.Messages {
		text := m.Content.Text
		if m.Content.Parts != nil {
			b, _ := json.Marshal(m.Content.Parts)
			text = string(b)
		}
		if m.Role == "system" || m.Role == "developer" {
			sys = append(sys, text)
			continue
		}
		cr.Messages = append(cr.Messages, cache.Message{Role: m.Role, Content: text})
	}
	cr.System = strings.Join(sys, "\n")
	var status int
	var ctype string
	gen := func(ctx context.Context) ([]byte, float64, error) {
		st, ct, b, err := s.forwardBuffered(c, ur, "/chat/completions", body)
		status, ctype = st, ct
		if err != nil {
			return nil, 0, err
		}
		if st != http.StatusOK {
			// Not cacheable: hand the upstream's answer back as an error.
			return nil, 0, &upstreamStatus{status: st, ctype: ct, body: b}
		}
		var u struct {
			Usage Usage `json:"usage"`
		}
		_ = json.Unmarshal(b, &u)
		return b, float64(u.Usage.CompletionTokens), nil
	}
	l, out, err := s.cache.Do(s.baseCtx, cr, gen)
	setCacheHeaders(c, l)
	var us *upstreamStatus
	switch {
	case errors.As(err, &us):
		c.Set(fiber.HeaderContentType, us.ctype)
		return c.Status(us.status).Send(us.body)
	case err != nil:
		return s.upstreamError(c, ur, err)
	}
	if v := viewOf(l); l.Hit && v != nil {
		id := v.storedID
		if id == "" {
			id = newCompletionID(endpointChat)
		}
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
		c.Status(http.StatusOK)
		v.body.write(c, id, time.Now().Unix())
		return nil
	}
	if l.Hit {
		var id string
		var m map[string]json.RawMessage
		if json.Unmarshal(out, &m) == nil {
			_ = json.Unmarshal(m["id"], &id)
		}
		if id == "" {
			id = newCompletionID(endpointChat)
		}
		out, _ = rewriteCached(out, id, time.Now().Unix(), true)
		ctype = fiber.MIMEApplicationJSON
		status = http.StatusOK
	}
	if ctype == "" {
		ctype = fiber.MIMEApplicationJSON
	}
	if status == 0 {
		status = http.StatusOK
	}
	c.Set(fiber.HeaderContentType, ctype)
	return c.Status(status).Send(out)
}

type upstreamStatus struct {
	status int
	ctype  string
	body   []byte
}

func (e *upstreamStatus) Error() string { return fmt.Sprintf("upstream status %d", e.status) }

func (s *Server) upstreamError(c *fiber.Ctx, ur *upstreamRoute, err error) error {
	s.logger(c).Warn("upstream failed", "upstream", ur.up.cfg.Name, "err", err)
	if errors.Is(err, context.DeadlineExceeded) {
		return &APIError{Status: http.StatusGatewayTimeout, Type: "server_error", Code: "upstream_timeout",
			Message: fmt.Sprintf("Upstream %s did not answer in time.", ur.up.cfg.Name)}
	}
	return &APIError{Status: http.StatusBadGateway, Type: "server_error", Code: "upstream_error",
		Message: fmt.Sprintf("Upstream %s failed: %v", ur.up.cfg.Name, errors.Unwrap(err))}
}

// forwardBuffered sends body and reads the whole answer (bounded).
func (s *Server) forwardBuffered(c *fiber.Ctx, ur *upstreamRoute, path string, body []byte) (int, string, []byte, error) {
	out, err := withModel(body, c.Locals(localModel).(string), ur.target)
	if err != nil {
		return 0, "", nil, err
	}
	ctx, cancel := context.WithTimeout(withBuffered(s.baseCtx), ur.up.cfg.Timeout)
	defer cancel()
	watch := watchConnLazily(c.Context().Conn(), func() { cancel() })
	defer watch.stop()
	resp, err := ur.up.do(ctx, http.MethodPost, path, out, forwardHeaders(c), s.met)
	if err != nil {
		return 0, "", nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxUpstreamBody+1))
	if err != nil {
		return 0, "", nil, fmt.Errorf("%w: %s: reading body: %w", ErrUpstream, ur.up.cfg.Name, err)
	}
	if len(b) > maxUpstreamBody {
		return 0, "", nil, fmt.Errorf("%w: %s: response exceeds %d bytes", ErrUpstream, ur.up.cfg.Name, maxUpstreamBody)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), b, nil
}

// proxy forwards body to the upstream at path and relays the answer:
// buffered, or (stream) piped through as it arrives. Retries happen only
// before any byte reached the client.
func (s *Server) proxy(c *fiber.Ctx, ur *upstreamRoute, path string, body []byte, stream bool) error {
	if !stream {
		st, ct, b, err := s.forwardBuffered(c, ur, path, body)
		if err != nil {
			return s.upstreamError(c, ur, err)
		}
		if ct == "" {
			ct = fiber.MIMEApplicationJSON
		}
		c.Set(fiber.HeaderContentType, ct)
		return c.Status(st).Send(b)
	}
	out, err := withModel(body, c.Locals(localModel).(string), ur.target)
	if err != nil {
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
		return s.upstreamError(c, ur, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		defer s.inflight.Done()
		defer cancel()
		defer watch.stop()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxUpstreamBody))
		c.Set(fiber.HeaderContentType, resp.Header.Get("Content-Type"))
		return c.Status(resp.StatusCode).Send(b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		c.Set(fiber.HeaderContentType, ct)
	} else {
		setSSEHeaders(c)
	}
	c.Set(fiber.HeaderCacheControl, "no-cache")
	log := s.logger(c)
	name := ur.up.cfg.Name
	c.Context().SetBodyStreamWriter(func(w *bufio.Writer) {
		defer s.inflight.Done()
		defer watch.stop()
		defer cancel()
		defer resp.Body.Close()
		n, err := copyStream(w, resp.Body, cancel)
		if err != nil && ctx.Err() == nil {
			log.Warn("upstream stream broke", "upstream", name, "bytes", n, "err", err)
		}
	})
	return nil
}

// handleEmbeddings serves /v1/embeddings from a local embedder or an upstream.
func (s *Server) handleEmbeddings(c *fiber.Ctx) error {
	body := c.Body()
	var head modelOnly
	if err := decodeJSON(body, &head); err != nil {
		return err
	}
	c.Locals(localModel, head.Model)
	if ur, ok := s.ups[head.Model]; ok {
		return s.proxy(c, ur, "/embeddings", body, false)
	}
	emb, ok := s.embed[head.Model]
	if !ok {
		if _, local := s.local[head.Model]; local {
			return errInvalid("model", "model_not_supported", "Model '%s' does not serve embeddings; use one of the embedding models listed by /v1/models.", head.Model)
		}
		if head.Model == "" {
			return errInvalid("model", "missing_required_parameter", "you must provide a model parameter")
		}
		return errModelNotFound(head.Model)
	}
	var req EmbeddingRequest
	if err := decodeJSON(body, &req); err != nil {
		return err
	}
	if req.Input == nil {
		return errInvalid("input", "missing_required_parameter", "Missing required parameter: 'input'.")
	}
	if req.Input.Tokens != nil {
		return errInvalid("input", "unsupported_parameter", "Token-array input is not supported by embedding model '%s'; send text.", head.Model)
	}
	if len(req.Input.Texts) == 0 || len(req.Input.Texts) > 2048 {
		return errInvalid("input", "invalid_value", "Invalid 'input': between 1 and 2048 texts, got %d.", len(req.Input.Texts))
	}
	for i, t := range req.Input.Texts {
		if t == "" {
			return errInvalid("input", "invalid_value", "Invalid 'input': text %d is empty.", i)
		}
	}
	format := "float"
	if req.EncodingFormat != nil {
		format = *req.EncodingFormat
		if format != "float" && format != "base64" {
			return errInvalid("encoding_format", "invalid_value", "Invalid 'encoding_format': '%s'. Supported values are: 'float' and 'base64'.", format)
		}
	}
	if req.Dimensions != nil && *req.Dimensions != emb.Dim() {
		return errInvalid("dimensions", "unsupported_parameter", "Model '%s' has %d dimensions and cannot produce %d.", head.Model, emb.Dim(), *req.Dimensions)
	}
	vecs, err := emb.Embed(c.UserContext(), req.Input.Texts)
	if err != nil {
		return errInternal("embedding failed: " + err.Error())
	}
	resp := EmbeddingResponse{Object: "list", Model: head.Model}
	words := 0
	for i, v := range vecs {
		e := Embedding{Object: "embedding", Index: i, Embedding: v}
		if format == "base64" {
			e.Embedding = float32Base64(v)
		}
		resp.Data = append(resp.Data, e)
		words += len(strings.Fields(req.Input.Texts[i]))
	}
	// Usage counts whitespace-separated words: the lexical embedder has no tokenizer.
	resp.Usage = Usage{PromptTokens: words, TotalTokens: words}
	return c.JSON(resp)
}
