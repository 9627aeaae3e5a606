package gateway

import (
	"crypto/sha256"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
)

// authenticator maps API keys to tenants and their rate limiters. Keys are
// looked up by their SHA-256 so that the map never holds them in clear.
type authenticator struct {
	keys map[[32]byte]*keyState
}

// keyState is one key's tenant and limits. Safe for concurrent use.
type keyState struct {
	tenant string
	lim    Limits

	mu        sync.Mutex
	reqTokens float64 // request bucket, capacity burst, refills lim.RequestsPerSecond/s
	tokTokens float64 // token bucket, capacity TokensPerMinute, refills TokensPerMinute/60 per s; may go negative
	last      time.Time
}

func newAuthenticator(cfg AuthConfig, getenv func(string) string) (*authenticator, error) {
	a := &authenticator{keys: map[[32]byte]*keyState{}}
	for i, k := range cfg.Keys {
		key := k.Key
		if k.KeyEnv != "" {
			key = getenv(k.KeyEnv)
			if key == "" {
				return nil, fmt.Errorf("%w: auth.keys[%d].key_env: environment variable %s is empty", ErrConfig, i, k.KeyEnv)
			}
		}
		lim := cfg.Defaults
		if k.Limits != nil {
			lim = *k.Limits
		}
		if lim.RequestsPerSecond > 0 && lim.Burst == 0 {
			lim.Burst = int(math.Max(1, math.Ceil(lim.RequestsPerSecond)))
		}
		h := sha256.Sum256([]byte(key))
		if _, dup := a.keys[h]; dup {
			return nil, fmt.Errorf("%w: auth.keys[%d]: duplicate key", ErrConfig, i)
		}
		a.keys[h] = &keyState{tenant: k.Tenant, lim: lim, reqTokens: float64(lim.Burst), tokTokens: float64(lim.TokensPerMinute)}
	}
	return a, nil
}

func (a *authenticator) enabled() bool { return len(a.keys) > 0 }

func (a *authenticator) lookup(key string) *keyState {
	return a.keys[sha256.Sum256([]byte(key))]
}

// refill advances both buckets to now. Caller holds mu.
func (k *keyState) refill(now time.Time) {
	if k.last.IsZero() {
		k.last = now
		return
	}
	dt := now.Sub(k.last).Seconds()
	if dt <= 0 {
		return
	}
	k.last = now
	if k.lim.RequestsPerSecond > 0 {
		k.reqTokens = math.Min(float64(k.lim.Burst), k.reqTokens+dt*k.lim.RequestsPerSecond)
	}
	if k.lim.TokensPerMinute > 0 {
		k.tokTokens = math.Min(float64(k.lim.TokensPerMinute), k.tokTokens+dt*float64(k.lim.TokensPerMinute)/60)
	}
}

// admit takes one request from the request bucket. On refusal it says
// which limit and how long until a retry can succeed.
func (k *keyState) admit(now time.Time) (ok bool, which string, retry time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.refill(now)
	// The token budget is checked by reserve, once the request's size is
	// known.
	if k.lim.RequestsPerSecond > 0 {
		if k.reqTokens < 1 {
			need := 1 - k.reqTokens
			return false, "requests", time.Duration(need / k.lim.RequestsPerSecond * float64(time.Second))
		}
		k.reqTokens--
	}
	return true, "", 0
}

// remaining reports the buckets' whole tokens left (after a refill to now).
func (k *keyState) remaining(now time.Time) (requests, tokens int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.refill(now)
	return int(math.Max(0, k.reqTokens)), int(math.Max(0, k.tokTokens))
}

// reserve takes n tokens from the token bucket at admission, before the
// request runs, so that concurrent requests cannot all pass on the same
// budget. A request fits when the bucket holds min(n, TokensPerMinute)
// tokens: one larger than the whole per-minute budget is admitted only into
// a full bucket and then drives it negative (it pays in waiting time for
// the next requests). On refusal it reports how long until the request
// would fit.
func (k *keyState) reserve(n int, now time.Time) (ok bool, retry time.Duration) {
	if k.lim.TokensPerMinute <= 0 || n <= 0 {
		return true, 0
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.refill(now)
	need := math.Min(float64(n), float64(k.lim.TokensPerMinute))
	if k.tokTokens < need {
		rate := float64(k.lim.TokensPerMinute) / 60
		return false, time.Duration((need - k.tokTokens) / rate * float64(time.Second))
	}
	k.tokTokens -= float64(n)
	return true, 0
}

// charge takes n tokens from the token bucket (n < 0 gives tokens back, up
// to the bucket's capacity).
func (k *keyState) charge(n int, now time.Time) {
	if k.lim.TokensPerMinute <= 0 || n == 0 {
		return
	}
	k.mu.Lock()
	k.refill(now)
	k.tokTokens = math.Min(float64(k.lim.TokensPerMinute), k.tokTokens-float64(n))
	k.mu.Unlock()
}

// reservation is what a request took from its key's token bucket at
// admission. settle replaces it by what the request really used.
type reservation struct {
	k    *keyState
	n    int
	once sync.Once
}

// settle charges used tokens instead of the reserved ones (the difference
// goes back to the bucket, or is taken from it when the request used more).
// Safe on a nil reservation and more than once (only the first counts).
func (r *reservation) settle(used int) {
	if r == nil {
		return
	}
	r.once.Do(func() {
		if used < 0 {
			used = 0
		}
		r.k.charge(used-r.n, time.Now())
	})
}

// reserveTokens takes n tokens from the caller's key (no-op without keys or
// a tokens-per-minute limit): nil reservation and nil error when nothing
// was reserved, a 429 with Retry-After when the budget does not allow n.
func (s *Server) reserveTokens(c *fiber.Ctx, n int) (*reservation, error) {
	ks, _ := c.Locals(localKey).(*keyState)
	if ks == nil || ks.lim.TokensPerMinute <= 0 {
		return nil, nil
	}
	now := time.Now()
	ok, retry := ks.reserve(n, now)
	_, tokLeft := ks.remaining(now)
	c.Set("X-Ratelimit-Remaining-Tokens", strconv.Itoa(tokLeft))
	if !ok {
		s.met.rateLimited.WithLabelValues(ks.tenant, "tokens").Inc()
		if retry < time.Second {
			retry = time.Second
		}
		return nil, &APIError{Status: http.StatusTooManyRequests, Type: "tokens", Code: "rate_limit_exceeded", RetryAfter: retry,
			Message: fmt.Sprintf("Rate limit reached for tenant %s on tokens per min: this request reserves %d tokens (prompt plus max_tokens) and %d are left. Please try again in %s.",
				ks.tenant, n, tokLeft, retry.Round(time.Millisecond))}
	}
	return &reservation{k: ks, n: n}, nil
}

func bearer(c *fiber.Ctx) string {
	h := c.Get(fiber.HeaderAuthorization)
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	if k := c.Get("api-key"); k != "" {
		return k
	}
	return ""
}

// authenticate resolves the tenant of a /v1 request and applies its limits.
func (s *Server) authenticate(c *fiber.Ctx) error {
	if !s.auth.enabled() {
		c.Locals(localTenant, "default")
		return c.Next()
	}
	key := bearer(c)
	if key == "" {
		return errUnauthorized("You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).")
	}
	ks := s.auth.lookup(key)
	if ks == nil {
		return errUnauthorized("Incorrect API key provided: " + redact(key) + ".")
	}
	c.Locals(localTenant, ks.tenant)
	c.Locals(localKey, ks)
	now := time.Now()
	ok, which, retry := ks.admit(now)
	// OpenAI's rate-limit headers, for the limits this key has.
	reqLeft, tokLeft := ks.remaining(now)
	if ks.lim.RequestsPerSecond > 0 {
		c.Set("X-Ratelimit-Limit-Requests", strconv.Itoa(ks.lim.Burst))
		c.Set("X-Ratelimit-Remaining-Requests", strconv.Itoa(reqLeft))
	}
	if ks.lim.TokensPerMinute > 0 {
		c.Set("X-Ratelimit-Limit-Tokens", strconv.Itoa(ks.lim.TokensPerMinute))
		c.Set("X-Ratelimit-Remaining-Tokens", strconv.Itoa(tokLeft))
	}
	if !ok {
		s.met.rateLimited.WithLabelValues(ks.tenant, which).Inc()
		if retry < time.Second {
			retry = time.Second
		}
		return &APIError{Status: http.StatusTooManyRequests, Type: which, Code: "rate_limit_exceeded", RetryAfter: retry,
			Message: fmt.Sprintf("Rate limit reached for tenant %s on %s per %s. Please try again in %s.", ks.tenant, which, perUnit(which), retry.Round(time.Millisecond))}
	}
	return c.Next()
}

func perUnit(which string) string {
	if which == "tokens" {
		return "min"
	}
	return "second"
}

// redact shows only the ends of a key.
func redact(k string) string {
	if len(k) <= 8 {
		return "****"
	}
	return k[:3] + "****" + k[len(k)-4:]
}
