// Package gateway is specgate's OpenAI-compatible HTTP front end (fiber v2):
// request and response types in OpenAI's exact shapes, SSE streaming, API
// keys mapped to tenants with per-key rate limits, routing by model name to
// local engines or upstream OpenAI-compatible servers, the semantic cache,
// Prometheus metrics and a dashboard page.
package gateway

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/specgate/specgate/cache"
	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/tokenizer"
)

// Tokenizer is what the gateway needs from a local model's tokenizer
// (satisfied by *tokenizer.Tokenizer).
type Tokenizer interface {
	Encode(text string, addSpecial bool) []int32
	Decode(ids []int32, skipSpecial bool) string
	RenderChat(msgs []tokenizer.Message, addGenerationPrompt bool) (string, error)
	HasChatTemplate() bool
}

// KVStats reports a local model's KV memory (satisfied by
// *engine.BlockManager). Optional; exported as a gauge.
type KVStats interface {
	UsedBlocks() int
	CachedBlocks() int
	NumBlocks() int
}

// LocalModel is one model served in-process by the engine.
type LocalModel struct {
	Name      string
	Aliases   []string
	Generator engine.Generator
	Tokenizer Tokenizer
	// ContextLength bounds prompt + completion tokens (0 = unchecked here;
	// the engine still reports ErrContextLength).
	ContextLength int
	// DefaultMaxTokens applies when a request gives no max_tokens (0 = up
	// to the context length).
	DefaultMaxTokens int
	KV               KVStats // may be nil
	Created          time.Time
	// Drafts are the model-free draft sources (drafts.go); nil = only a
	// request's own `prediction` drafts.
	Drafts *Drafts
}

// ResponseCache is what the gateway needs from the semantic cache
// (satisfied by *cache.Cache).
type ResponseCache interface {
	Get(ctx context.Context, req *cache.Request) (cache.Lookup, error)
	Put(ctx context.Context, req *cache.Request, response []byte, cost float64) error
}

// Options configure a Server. Config is required; everything else is
// optional.
type Options struct {
	Config *Config
	Models []*LocalModel
	Cache  ResponseCache // nil = no response cache
	// Embedders serve /v1/embeddings by model name (the cache's embedder
	// under Config.Cache.EmbeddingModel).
	Embedders map[string]cache.Embedder
	// Registry receives the gateway's collectors and is served on /metrics;
	// nil = a new registry. Register the cache's collectors on it too.
	Registry *prometheus.Registry
	Logger   *slog.Logger
	// UpstreamTransport replaces the HTTP transport to upstreams (tests).
	UpstreamTransport http.RoundTripper
	// Getenv resolves api_key_env / key_env (nil = os.Getenv).
	Getenv func(string) string
}

// Server is the gateway. Create with New, run with Serve, stop with Shutdown.
type Server struct {
	cfg        *Config
	app        *fiber.App
	log        *slog.Logger
	reg        *prometheus.Registry
	met        *metrics
	cache      ResponseCache
	embed      map[string]cache.Embedder
	local      map[string]*LocalModel // by name and alias
	ups        map[string]*upstreamRoute
	models     []Model // for /v1/models, sorted by id
	auth       *authenticator
	adminGuard adminGuard
	started    time.Time
	ready      atomic.Bool
	baseCtx    context.Context
	abort      context.CancelFunc
	inflight   sync.WaitGroup
	flights    streamFlights
	stores     storeQueue // the response cache's writes (storeq.go)
	prompts    promptMemo // chat prompt tokens of recent requests (promptmemo.go)

	respOnce  sync.Once
	respStore *responseStore // stored /v1/responses answers (responses.go)
	histOnce  sync.Once
	hist      *history // the dashboard's last hour (history.go)
}

type upstreamRoute struct {
	up     *upstream
	target string // model name at the upstream
}

// New builds the server and its routes; it does not listen.
func New(opts Options) (*Server, error) {
	if opts.Config == nil {
		return nil, fmt.Errorf("%w: Options.Config is nil", ErrConfig)
	}
	cfg := opts.Config
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	s := &Server{
		cfg:     cfg,
		log:     opts.Logger,
		reg:     opts.Registry,
		cache:   opts.Cache,
		embed:   map[string]cache.Embedder{},
		local:   map[string]*LocalModel{},
		ups:     map[string]*upstreamRoute{},
		started: time.Now(),
	}
	if s.log == nil {
		s.log = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	if s.reg == nil {
		s.reg = prometheus.NewRegistry()
	}
	s.baseCtx, s.abort = context.WithCancel(context.Background())
	s.stores.s = s
	if r, ok := opts.Cache.(interface{ SetRenderer(cache.Renderer) }); ok {
		// Hits then carry their response pre-rendered (cacheview.go).
		r.SetRenderer(renderCached)
	}
	var err error
	if s.met, err = newMetrics(s.reg, opts.Models); err != nil {
		return nil, err
	}
	if s.auth, err = newAuthenticator(cfg.Auth, getenv); err != nil {
		return nil, err
	}
	if s.adminGuard, err = newAdminGuard(cfg.Auth, getenv); err != nil {
		return nil, err
	}
	now := time.Now().Unix()
	addModel := func(id, owner string, created int64) {
		s.models = append(s.models, Model{ID: id, Object: "model", Created: created, OwnedBy: owner})
	}
	for _, m := range opts.Models {
		if m == nil || m.Generator == nil || m.Tokenizer == nil {
			return nil, fmt.Errorf("%w: local model %v needs a Generator and a Tokenizer", ErrConfig, m)
		}
		created := m.Created.Unix()
		if m.Created.IsZero() {
			created = now
		}
		for _, name := range append([]string{m.Name}, m.Aliases...) {
			if _, dup := s.local[name]; dup {
				return nil, fmt.Errorf("%w: model name %q used twice", ErrConfig, name)
			}
			s.local[name] = m
			addModel(name, "specgate", created)
		}
	}
	for i := range cfg.Upstreams {
		uc := cfg.Upstreams[i]
		up, err := newUpstream(uc, getenv, opts.UpstreamTransport)
		if err != nil {
			return nil, err
		}
		for _, m := range uc.Models {
			if err := s.claim(m); err != nil {
				return nil, err
			}
			s.ups[m] = &upstreamRoute{up: up, target: m}
			addModel(m, uc.Name, now)
		}
		for alias, target := range uc.Aliases {
			if err := s.claim(alias); err != nil {
				return nil, err
			}
			s.ups[alias] = &upstreamRoute{up: up, target: target}
			addModel(alias, uc.Name, now)
		}
	}
	for name, e := range opts.Embedders {
		if err := s.claim(name); err != nil {
			return nil, err
		}
		s.embed[name] = e
		addModel(name, "specgate", now)
	}
	sort.Slice(s.models, func(i, j int) bool { return s.models[i].ID < s.models[j].ID })

	s.app = fiber.New(fiber.Config{
		AppName:               "specgate",
		BodyLimit:             cfg.Server.MaxBodyBytes,
		ReadTimeout:           cfg.Server.ReadTimeout,
		IdleTimeout:           cfg.Server.IdleTimeout,
		DisableStartupMessage: true,
		ErrorHandler:          s.errorHandler,
		Network:               "tcp",
	})
	s.routes()
	s.ready.Store(true)
	return s, nil
}

func (s *Server) claim(name string) error {
	if _, ok := s.local[name]; ok {
		return fmt.Errorf("%w: model name %q used twice", ErrConfig, name)
	}
	if _, ok := s.ups[name]; ok {
		return fmt.Errorf("%w: model name %q used twice", ErrConfig, name)
	}
	if _, ok := s.embed[name]; ok {
		return fmt.Errorf("%w: model name %q used twice", ErrConfig, name)
	}
	return nil
}

// App returns the fiber app (for tests and embedding).
func (s *Server) App() *fiber.App { return s.app }

// Registry returns the metrics registry served on /metrics.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// Serve accepts connections on ln until Shutdown.
func (s *Server) Serve(ln net.Listener) error { return s.app.Listener(ln) }

// Shutdown stops accepting connections, lets in-flight requests and streams
// finish until ctx's deadline, then cancels every remaining generation and
// waits for the handlers to return.
func (s *Server) Shutdown(ctx context.Context) error {
	s.ready.Store(false)
	done := make(chan error, 1)
	go func() { done <- s.app.ShutdownWithContext(ctx) }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		s.log.Warn("shutdown deadline reached; cancelling in-flight generations", "err", err)
	}
	s.abort()
	waited := make(chan struct{})
	go func() { s.inflight.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
		s.stores.drain(storeQueueDrain, true)
		return fmt.Errorf("%w: handlers still running 5s after cancel", ErrShuttingDown)
	}
	// The answers' cache writes queued by the handlers (storeq.go).
	if !s.stores.drain(storeQueueDrain, true) {
		return fmt.Errorf("%w: cache writes still queued %v after the handlers returned", ErrShuttingDown, storeQueueDrain)
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return fmt.Errorf("%w: %w", ErrShuttingDown, err)
	}
	return nil
}

// Locals keys.
const (
	localRequestID = "specgate.request_id"
	localTenant    = "specgate.tenant"
	localLogger    = "specgate.logger"
	localKey       = "specgate.key"
	localModel     = "specgate.model"
)

func (s *Server) routes() {
	app := s.app
	app.Use(s.requestContext)
	app.Use(s.cors) // before auth: preflights carry no key
	health := func(c *fiber.Ctx) error {
		return c.JSON(fiber.Map{"status": "ok", "uptime_s": int64(time.Since(s.started).Seconds())})
	}
	app.Get("/healthz", health)
	app.Get("/health", health) // what vLLM and LiteLLM answer
	app.Get("/version", s.handleVersion)
	app.Get("/readyz", func(c *fiber.Ctx) error {
		if !s.ready.Load() {
			return errUnavailable("shutting down", 0)
		}
		return c.JSON(fiber.Map{"status": "ready"})
	})
	// Operator endpoints: behind the admin key (admin.go).
	app.Get("/metrics", s.admin, s.handleMetrics)
	app.Get("/stats", s.admin, s.handleStats)
	app.Get("/stats/history", s.admin, s.handleHistory)
	s.historyRing() // starts sampling now, so that the page has history when first opened
	app.Get("/", s.admin, s.handleDashboard)
	app.Get("/dashboard", s.admin, s.handleDashboard)

	v1 := app.Group("/v1", s.authenticate)
	v1.Post("/chat/completions", s.handleChat)
	v1.Post("/completions", s.handleCompletions)
	v1.Post("/embeddings", s.handleEmbeddings)
	v1.Post("/responses", s.handleResponses)
	v1.Get("/responses/:id", s.handleGetResponse)
	v1.Get("/models", s.handleModels)
	v1.Get("/models/*", s.handleModel)
	app.Use(func(c *fiber.Ctx) error {
		return &APIError{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "unknown_url",
			Message: fmt.Sprintf("Unknown request URL: %s %s.", c.Method(), c.Path())}
	})
}

// newRequestID returns "req_" and 24 random hex digits. Request and
// completion ids grant nothing (stored /v1/responses ids, which do, come
// from crypto/rand), so they come from math/rand/v2's generator (ChaCha8,
// seeded by the runtime from the OS): no system call per request, which
// crypto/rand makes where getrandom has no vDSO (older kernels, gVisor).
func newRequestID() string { return randomID("req_") }

// randomID is prefix (at most 24 bytes) and 24 random hex digits, built
// in one allocation.
func randomID(prefix string) string {
	var b [12]byte
	a, c := mrand.Uint64(), mrand.Uint32()
	for i := 0; i < 8; i++ {
		b[i] = byte(a >> (8 * i))
	}
	for i := 0; i < 4; i++ {
		b[8+i] = byte(c >> (8 * i))
	}
	var out [48]byte // prefixes up to 24 bytes
	n := copy(out[:], prefix)
	hex.Encode(out[n:], b[:])
	return string(out[:n+24])
}

// validRequestID accepts client ids of at most 128 printable ASCII bytes.
func validRequestID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x21 || id[i] > 0x7e {
			return false
		}
	}
	return true
}

// requestContext assigns the request id, echoes it, logs the request and
// records HTTP metrics.
func (s *Server) requestContext(c *fiber.Ctx) error {
	start := time.Now()
	id := c.Get("X-Request-ID")
	if !validRequestID(id) {
		id = newRequestID()
	}
	c.Set("X-Request-ID", id)
	c.Locals(localRequestID, id)
	s.met.inflight.Inc()
	err := c.Next()
	s.met.inflight.Dec()
	if err != nil {
		if herr := s.errorHandler(c, err); herr != nil {
			return herr
		}
	}
	status := c.Response().StatusCode()
	route := c.Route().Path
	if route == "/" && c.Path() != "/" {
		route = "unmatched"
	}
	s.met.httpReqOf.of(routeCode{route, status}).Inc()
	s.met.httpDurOf.of(route).Observe(time.Since(start).Seconds())
	lvl := slog.LevelInfo
	if status >= 500 {
		lvl = slog.LevelError
	}
	if route != "/metrics" && route != "/stats" && route != "/healthz" && route != "/readyz" && s.log.Enabled(context.Background(), lvl) {
		// The line logger(c) would write, without cloning a logger per request.
		attrs := make([]slog.Attr, 0, 7)
		attrs = append(attrs, slog.String("request_id", id), slog.String("method", c.Method()), slog.String("path", logString(c.Path())),
			slog.Int("status", status), slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000))
		if t, ok := c.Locals(localTenant).(string); ok {
			attrs = append(attrs, slog.String("tenant", t))
		}
		if m, ok := c.Locals(localModel).(string); ok {
			attrs = append(attrs, slog.String("model", logString(m)))
		}
		s.log.LogAttrs(context.Background(), lvl, "request", attrs...)
	}
	return nil
}

// errorHandler renders any error as an OpenAI error body.
func (s *Server) errorHandler(c *fiber.Ctx, err error) error {
	var ae *APIError
	var fe *fiber.Error
	switch {
	case errors.As(err, &ae):
	case errors.As(err, &fe):
		switch fe.Code {
		case fiber.StatusRequestEntityTooLarge:
			ae = errTooLarge(s.cfg.Server.MaxBodyBytes)
		case fiber.StatusNotFound:
			ae = &APIError{Status: 404, Type: "invalid_request_error", Code: "unknown_url", Message: fe.Message}
		case fiber.StatusMethodNotAllowed:
			ae = &APIError{Status: 405, Type: "invalid_request_error", Code: "method_not_allowed", Message: fe.Message}
		default:
			typ := "invalid_request_error"
			if fe.Code >= 500 {
				typ = "server_error"
			}
			ae = &APIError{Status: fe.Code, Type: typ, Message: fe.Message}
		}
	default:
		s.logger(c).Error("internal error", "err", err)
		ae = errInternal("The server had an error while processing your request.")
	}
	if ae.RetryAfter > 0 {
		secs := int((ae.RetryAfter + time.Second - 1) / time.Second)
		c.Set("Retry-After", strconv.Itoa(secs))
	}
	if len(c.Response().Header.Peek("X-Request-ID")) == 0 {
		id := c.Get("X-Request-ID")
		if !validRequestID(id) {
			id = newRequestID()
		}
		c.Set("X-Request-ID", id)
	}
	body, _ := json.Marshal(ae)
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Status(ae.Status).Send(body)
}

// logger is the request's logger, with its request_id (built on first use).
func (s *Server) logger(c *fiber.Ctx) *slog.Logger {
	if l, ok := c.Locals(localLogger).(*slog.Logger); ok {
		return l
	}
	if id, ok := c.Locals(localRequestID).(string); ok {
		l := s.log.With("request_id", id)
		c.Locals(localLogger, l)
		return l
	}
	return s.log
}

func (s *Server) handleModels(c *fiber.Ctx) error {
	return c.JSON(ModelList{Object: "list", Data: s.models})
}

func (s *Server) handleModel(c *fiber.Ctx) error {
	id := c.Params("*")
	for _, m := range s.models {
		if m.ID == id {
			return c.JSON(m)
		}
	}
	return errModelNotFound(id)
}

// modelOnly is the first decode of a body: what routing, the checks every
// request gets and the upstream token reservation need. The token fields
// stay raw: an upstream judges their values itself.
type modelOnly struct {
	Model  string  `json:"model"`
	Stream *bool   `json:"stream"`
	User   *string `json:"user"`

	MaxTokens           json.RawMessage `json:"max_tokens"`
	MaxCompletionTokens json.RawMessage `json:"max_completion_tokens"`
	N                   json.RawMessage `json:"n"`

	// whole is the chat request when the body was decoded whole instead
	// (decodeChat); the token fields are then read from it.
	whole *ChatCompletionRequest
}

// tokenFields are the reservation's inputs: max_tokens,
// max_completion_tokens and n, each with ok = false when absent, null or
// not an integer.
func (h *modelOnly) tokenFields() (maxTok, maxCompl, n int, okTok, okCompl, okN bool) {
	if w := h.whole; w != nil {
		get := func(p *int) (int, bool) {
			if p == nil {
				return 0, false
			}
			return *p, true
		}
		maxTok, okTok = get(w.MaxTokens)
		maxCompl, okCompl = get(w.MaxCompletionTokens)
		n, okN = get(w.N)
		return
	}
	maxTok, okTok = rawInt(h.MaxTokens)
	maxCompl, okCompl = rawInt(h.MaxCompletionTokens)
	n, okN = rawInt(h.N)
	return
}

// decodeChat is a chat body's one decode. With a response cache, or with
// local models and no upstreams, the body is decoded whole
// (ChatCompletionRequest): a local model and the cache key need every
// field, and an upstream request with a cache needs them for its key, so
// the routing fields come from that one decode (it was two: modelOnly,
// then the whole request). Where the whole decode fails, or where upstream
// requests need no more than modelOnly (no cache), the body is decoded as
// modelOnly: its errors are the client's answer, and a body only the
// upstream can judge is forwarded as before. head.whole is the decoded
// request when there is one.
func (s *Server) decodeChat(body []byte) (head modelOnly, err *APIError) {
	if s.cache != nil || len(s.ups) == 0 {
		req := new(ChatCompletionRequest)
		if decodeJSON(body, req) == nil {
			return modelOnly{Model: req.Model, Stream: req.Stream, User: req.User, whole: req}, nil
		}
	}
	if err := decodeJSON(body, &head); err != nil {
		return head, err
	}
	return head, nil
}

// route finds where a model name goes. Exactly one of the results is non-nil
// when err is nil.
func (s *Server) route(name string) (*LocalModel, *upstreamRoute, *APIError) {
	if m, ok := s.local[name]; ok {
		return m, nil, nil
	}
	if u, ok := s.ups[name]; ok {
		return nil, u, nil
	}
	if name == "" {
		return nil, nil, errInvalid("model", "missing_required_parameter", "you must provide a model parameter")
	}
	return nil, nil, errModelNotFound(name)
}

func tenantOf(c *fiber.Ctx) string {
	if t, ok := c.Locals(localTenant).(string); ok {
		return t
	}
	return "default"
}

func (s *Server) handleChat(c *fiber.Ctx) error {
	body := c.Body()
	head, aerr := s.decodeChat(body)
	if aerr != nil {
		return aerr
	}
	c.Locals(localModel, head.Model)
	if err := checkUser(head.User); err != nil {
		return err
	}
	lm, ur, aerr := s.route(head.Model)
	if aerr != nil {
		return aerr
	}
	if ur != nil {
		if err := s.reserveUpstream(c, ur, body, &head); err != nil {
			return err
		}
		return s.proxyChat(c, ur, body, head)
	}
	req := head.whole
	if req == nil {
		// The whole decode failed: its error is the answer.
		req = new(ChatCompletionRequest)
		if err := decodeJSON(body, req); err != nil {
			return err
		}
	}
	job, aerr := s.chatJob(lm, req)
	if aerr != nil {
		return aerr
	}
	job.tenant = tenantOf(c)
	job.user = req.User
	creq := s.chatCacheRequest(c, req, job)
	s.prepareDrafts(c, job, creq)
	return s.runLocal(c, job, creq)
}

func (s *Server) handleCompletions(c *fiber.Ctx) error {
	body := c.Body()
	var head modelOnly
	if err := decodeJSON(body, &head); err != nil {
		return err
	}
	c.Locals(localModel, head.Model)
	if err := checkUser(head.User); err != nil {
		return err
	}
	lm, ur, aerr := s.route(head.Model)
	if aerr != nil {
		return aerr
	}
	if ur != nil {
		if err := s.reserveUpstream(c, ur, body, &head); err != nil {
			return err
		}
		return s.proxy(c, ur, "/completions", body, head.Stream != nil && *head.Stream, nil)
	}
	var req CompletionRequest
	if err := decodeJSON(body, &req); err != nil {
		return err
	}
	job, aerr := s.completionJob(lm, &req)
	if aerr != nil {
		return aerr
	}
	job.tenant = tenantOf(c)
	job.user = req.User
	creq := s.completionCacheRequest(c, &req, job)
	s.prepareDrafts(c, job, creq)
	return s.runLocal(c, job, creq)
}

// cacheControl reads the request's Cache-Control directives (comma
// separated, case-insensitive, spaces around them ignored).
func cacheControl(c *fiber.Ctx) (noCache, noStore bool) {
	h := c.Get(fiber.HeaderCacheControl)
	for h != "" {
		d := h
		if i := strings.IndexByte(h, ','); i >= 0 {
			d, h = h[:i], h[i+1:]
		} else {
			h = ""
		}
		d = strings.TrimSpace(d)
		switch {
		case asciiFoldEq(d, "no-cache"):
			noCache = true
		case asciiFoldEq(d, "no-store"):
			noStore = true
		}
	}
	return
}

// asciiFoldEq reports whether s equals the lower-case ASCII lower with
// ASCII letters compared case-insensitively (what strings.ToLower(s) ==
// lower decides for these directives, without the copy).
func asciiFoldEq(s, lower string) bool {
	if len(s) != len(lower) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}
