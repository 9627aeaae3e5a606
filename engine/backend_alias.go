package engine

import (
	"github.com/specgate/specgate/engine/backend"
	"github.com/specgate/specgate/engine/model"
)

// The backend contract lives in package engine/backend, which the engine
// and the backends (engine/cpu, engine/cuda) both import; these aliases
// keep the engine API source-compatible for its callers.
type (
	Backend             = backend.Backend
	GreedyStepper       = backend.GreedyStepper
	ForwardRequest      = backend.ForwardRequest
	RowSample           = backend.RowSample
	DeviceSampler       = backend.DeviceSampler
	HiddenOnlyForwarder = backend.HiddenOnlyForwarder
	DraftHeads          = backend.DraftHeads
	HeadsBackend        = backend.HeadsBackend
	RowArgmaxer         = backend.RowArgmaxer
)

// ValidateRequest checks a ForwardRequest (index i in the batch) against a
// model config and a KV capacity (see backend.ValidateRequest).
func ValidateRequest(cfg Config, numSlots, i int, r *ForwardRequest) error {
	return backend.ValidateRequest(cfg, numSlots, i, r)
}

// Argmax returns the index of the largest value (lowest index on ties).
func Argmax(l []float32) int32 { return backend.Argmax(l) }

// Int8Weights reports whether w's projections are int8 (an int8 checkpoint
// or QuantizeWeights' result).
func Int8Weights(w *model.Weights) bool { return backend.Int8Weights(w) }
