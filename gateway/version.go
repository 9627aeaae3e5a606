package gateway

import (
	"runtime"
	"runtime/debug"
	"sync"

	"github.com/gofiber/fiber/v2"
)

// Version is the release name; builds set it with
// -ldflags "-X github.com/specgate/specgate/gateway.Version=v1.2.3".
// Without it, BuildVersion reports the VCS revision Go stamped in the binary.
var Version = "dev"

// VersionInfo is what `specgate version` prints and GET /version returns.
type VersionInfo struct {
	Version    string `json:"version"`
	Commit     string `json:"commit,omitempty"`      // VCS revision (vcs.revision)
	CommitTime string `json:"commit_time,omitempty"` // RFC 3339 (vcs.time)
	Modified   bool   `json:"modified,omitempty"`    // built from a tree with uncommitted changes
	GoVersion  string `json:"go_version"`
	Platform   string `json:"platform"` // GOOS/GOARCH
}

var buildVersion = sync.OnceValue(func() VersionInfo {
	v := VersionInfo{Version: Version, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v.Version == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v.Version = bi.Main.Version // go install module@version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Commit = s.Value
			case "vcs.time":
				v.CommitTime = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
	}
	return v
})

// BuildVersion describes this binary.
func BuildVersion() VersionInfo { return buildVersion() }

// String is one line: "specgate dev (3f2a1b9c0d1e, modified, 2026-11-23T19:00:00Z) go1.26 linux/amd64".
func (v VersionInfo) String() string {
	s := "specgate " + v.Version
	if v.Commit != "" {
		c := v.Commit
		if len(c) > 12 {
			c = c[:12]
		}
		if v.Modified {
			c += ", modified"
		}
		if v.CommitTime != "" {
			c += ", " + v.CommitTime
		}
		s += " (" + c + ")"
	}
	return s + " " + v.GoVersion + " " + v.Platform
}

func (s *Server) handleVersion(c *fiber.Ctx) error {
	return c.JSON(BuildVersion())
}
