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

// admit takes one request from the bucket. On refusal it says which limit
// and how long until a retry can succeed.
func (k *keyState) admit(now time.Time) (ok bool, which string, retry time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.refill(now)
	if k.lim.TokensPerMinute > 0 && k.tokTokens < 1 {
		need := 1 - k.tokTokens
		return false, "tokens", time.Duration(need / (float64(k.lim.TokensPerMinute) / 60) * float64(time.Second))
	}
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

// charge takes n tokens from the token bucket after a request finished.
func (k *keyState) charge(n int, now time.Time) {
	if k.lim.TokensPerMinute <= 0 || n <= 0 {
		return
	}
	k.mu.Lock()
	k.refill(now)
	k.tokTokens -= float64(n)
	k.mu.Unlock()
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
