package engine

import (
	"slices"

	"github.com/specgate/specgate/engine/model"
)

// Config parsing moved to package engine/model; these aliases keep the
// engine API source-compatible for its many callers.
type (
	Config      = model.Config
	RopeScaling = model.RopeScaling
)

// Rope scaling types (Config.RopeScaling.Type).
const (
	RopeDefault = model.RopeDefault
	RopeLinear  = model.RopeLinear
	RopeLlama3  = model.RopeLlama3
)

// MaxConfigSize bounds config.json and generation_config.json (bytes).
const MaxConfigSize = model.MaxConfigSize

// ParseConfig parses config.json bytes (see model.ParseConfig).
func ParseConfig(data []byte, file string) (Config, error) { return model.ParseConfig(data, file) }

// LoadConfig reads dir/config.json and dir/generation_config.json (see model.LoadConfig).
func LoadConfig(dir string) (Config, error) { return model.LoadConfig(dir) }

func containsID(ids []int32, id int32) bool { return slices.Contains(ids, id) }
