package gateway

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
)

// CORSConfig is server.cors: which web origins may call the API from a
// browser. Absent, every origin may (as vLLM and LiteLLM do): a browser
// page still needs an API key when keys are configured, since browsers
// never add Authorization by themselves. Disabled: no CORS headers, and
// preflights get 404 like any unknown route.
type CORSConfig struct {
	Disabled     bool          `yaml:"disabled"`
	AllowOrigins []string      `yaml:"allow_origins"` // "*" or scheme://host[:port]; default ["*"]
	AllowHeaders []string      `yaml:"allow_headers"` // default: whatever the preflight asks for
	MaxAge       time.Duration `yaml:"max_age"`       // preflight cache; default 10m
}

// Headers a browser script may read from responses.
const corsExposed = "X-Cache, X-Cache-Similarity, X-Request-ID, Retry-After, X-RateLimit-Limit-Requests, X-RateLimit-Remaining-Requests, X-RateLimit-Limit-Tokens, X-RateLimit-Remaining-Tokens"

func (c *CORSConfig) validate() error {
	for i, o := range c.AllowOrigins {
		if o == "*" {
			continue
		}
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return fmt.Errorf("%w: server.cors.allow_origins[%d] %q: want * or scheme://host[:port]", ErrConfig, i, o)
		}
	}
	if c.MaxAge < 0 {
		return fmt.Errorf("%w: server.cors.max_age %s: must be >= 0", ErrConfig, c.MaxAge)
	}
	return nil
}

// allowed returns the Access-Control-Allow-Origin value for origin, or "".
func (c *CORSConfig) allowed(origin string) string {
	if c.Disabled {
		return ""
	}
	if len(c.AllowOrigins) == 0 {
		return "*"
	}
	o := strings.TrimSuffix(origin, "/")
	for _, a := range c.AllowOrigins {
		if a == "*" {
			return "*"
		}
		if strings.EqualFold(strings.TrimSuffix(a, "/"), o) {
			return origin
		}
	}
	return ""
}

// cors answers preflights and adds the CORS headers to responses for
// allowed origins.
func (s *Server) cors(c *fiber.Ctx) error {
	origin := c.Get(fiber.HeaderOrigin)
	if origin == "" {
		return c.Next()
	}
	cc := &s.cfg.Server.CORS
	allow := cc.allowed(origin)
	if allow == "" {
		return c.Next() // no CORS headers: the browser refuses the answer
	}
	c.Set(fiber.HeaderAccessControlAllowOrigin, allow)
	if allow != "*" {
		c.Vary(fiber.HeaderOrigin)
	}
	if c.Method() == fiber.MethodOptions && c.Get(fiber.HeaderAccessControlRequestMethod) != "" {
		c.Set(fiber.HeaderAccessControlAllowMethods, "GET, POST, OPTIONS")
		hdrs := strings.Join(cc.AllowHeaders, ", ")
		if hdrs == "" {
			hdrs = c.Get(fiber.HeaderAccessControlRequestHeaders)
			c.Vary(fiber.HeaderAccessControlRequestHeaders)
		}
		if hdrs != "" {
			c.Set(fiber.HeaderAccessControlAllowHeaders, hdrs)
		}
		age := cc.MaxAge
		if age == 0 {
			age = 10 * time.Minute
		}
		c.Set(fiber.HeaderAccessControlMaxAge, strconv.Itoa(int(age.Seconds())))
		return c.SendStatus(http.StatusNoContent)
	}
	c.Set(fiber.HeaderAccessControlExposeHeaders, corsExposed)
	return c.Next()
}
