package gateway

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"

	"github.com/gofiber/fiber/v2"
)

// Operator endpoints (/metrics, /stats, /stats/history, the dashboard) show
// tenant names and per-tenant activity. They are guarded by admin.

type adminMode int

const (
	adminOpen   adminMode = iota // no API keys and no admin key: open (local use)
	adminKey                     // the admin key is required
	adminClosed                  // API keys but no admin key: closed
)

// adminGuard holds the resolved admin policy.
type adminGuard struct {
	mode adminMode
	hash [32]byte // SHA-256 of the admin key
}

func newAdminGuard(cfg AuthConfig, getenv func(string) string) (adminGuard, error) {
	key := cfg.AdminKey
	if cfg.AdminKeyEnv != "" {
		key = getenv(cfg.AdminKeyEnv)
		if key == "" {
			return adminGuard{}, fmt.Errorf("%w: auth.admin_key_env: environment variable %s is empty", ErrConfig, cfg.AdminKeyEnv)
		}
	}
	switch {
	case key != "":
		return adminGuard{mode: adminKey, hash: sha256.Sum256([]byte(key))}, nil
	case len(cfg.Keys) > 0 && !cfg.PublicMetrics:
		return adminGuard{mode: adminClosed}, nil
	}
	return adminGuard{mode: adminOpen}, nil
}

// presented returns the key a request offers: a bearer token, or the
// password of HTTP Basic auth.
func presented(c *fiber.Ctx) string {
	h := c.Get(fiber.HeaderAuthorization)
	if len(h) > 6 && strings.EqualFold(h[:6], "basic ") {
		raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(h[6:]))
		if err != nil {
			return ""
		}
		_, pass, _ := strings.Cut(string(raw), ":")
		return pass
	}
	return bearer(c)
}

// admin is the middleware of the operator endpoints.
func (s *Server) admin(c *fiber.Ctx) error {
	switch s.adminGuard.mode {
	case adminOpen:
		return c.Next()
	case adminClosed:
		return &APIError{Status: http.StatusUnauthorized, Type: "invalid_request_error", Code: "admin_key_required",
			Message: "Operator endpoints are closed because API keys are configured and no admin key is: set auth.admin_key, auth.admin_key_env or SPECGATE_ADMIN_KEY (or auth.public_metrics: true to open them)."}
	}
	key := presented(c)
	h := sha256.Sum256([]byte(key))
	if key != "" && subtle.ConstantTimeCompare(h[:], s.adminGuard.hash[:]) == 1 {
		return c.Next()
	}
	c.Set(fiber.HeaderWWWAuthenticate, `Basic realm="specgate admin", charset="UTF-8"`)
	msg := "This endpoint needs the admin key: send it as a bearer token (Authorization: Bearer ADMIN_KEY) or as the password of HTTP Basic auth."
	if key != "" {
		msg = "Incorrect admin key."
	}
	return &APIError{Status: http.StatusUnauthorized, Type: "invalid_request_error", Code: "invalid_admin_key", Message: msg}
}
