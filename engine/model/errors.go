// Package model describes a model independently of any backend: its
// config.json (parsed and validated), the architectures registered by name
// (tensor names, shapes and features of each) and typed weight tensors.
// It imports nothing of ours but the Hugging Face format leaves.
package model

import "errors"

// Errors of config and weight loading. engine re-exports them under the same
// names (engine.ErrBadConfig is ErrBadConfig).
var (
	ErrBadConfig  = errors.New("engine: bad model config")
	ErrBadWeights = errors.New("engine: bad weights")
)

// MaxPositionsLimit is the largest max_position_embeddings a config may have
// (and so the largest position a backend is asked for).
const MaxPositionsLimit = maxPositions
