package cpu

import (
	"github.com/specgate/specgate/engine/backend"
	"github.com/specgate/specgate/engine/model"
)

// The CPU tests moved here from package engine; these names keep them as
// they were written there.
type (
	Config         = model.Config
	RopeScaling    = model.RopeScaling
	Weights        = model.Weights
	LayerWeights   = model.Layer
	ForwardRequest = backend.ForwardRequest
)

const (
	RopeDefault = model.RopeDefault
	RopeLinear  = model.RopeLinear
	RopeLlama3  = model.RopeLlama3
)

func RandomWeights(cfg Config, seed uint64) *Weights { return model.RandomWeights(cfg, seed) }
