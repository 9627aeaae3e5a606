package gateway

import (
	_ "embed"

	"github.com/gofiber/fiber/v2"
)

//go:embed dashboard.html
var dashboardHTML []byte

func (s *Server) handleDashboard(c *fiber.Ctx) error {
	c.Set(fiber.HeaderContentType, fiber.MIMETextHTMLCharsetUTF8)
	c.Set(fiber.HeaderCacheControl, "no-store")
	return c.Send(dashboardHTML)
}
