package engine

import "github.com/specgate/specgate/engine/cpu"

// The CPU backend lives in package engine/cpu (the engine's default
// backend, LoadOptions.NewBackend nil); these aliases keep the engine API
// source-compatible for its callers.
type (
	CPUBackend = cpu.CPUBackend
	CPUOptions = cpu.Options
	Mat        = cpu.Mat
)

// NewCPUBackend allocates KV memory for numSlots slots (see cpu.NewCPUBackend).
func NewCPUBackend(cfg Config, w *Weights, numSlots, threads int) (*CPUBackend, error) {
	return cpu.NewCPUBackend(cfg, w, numSlots, threads)
}

// NewCPUBackendOpts allocates KV memory for numSlots slots with the fan-out
// options o (see cpu.New).
func NewCPUBackendOpts(cfg Config, w *Weights, numSlots int, o CPUOptions) (*CPUBackend, error) {
	return cpu.New(cfg, w, numSlots, o)
}

// TopK appends to dst the indices of the k largest values of l, largest
// first (see cpu.TopK).
func TopK(l []float32, k int, dst []int32) []int32 { return cpu.TopK(l, k, dst) }

// NewMat prepares a weight matrix for the CPU matmul (see cpu.NewMat).
func NewMat(w []float32, out, in int) *Mat { return cpu.NewMat(w, out, in) }

// RopeInvFreq returns the rotary inverse frequencies of cfg (see cpu.RopeInvFreq).
func RopeInvFreq(cfg Config) []float32 { return cpu.RopeInvFreq(cfg) }

// AddSiLU sets x[i] += SiLU(t[i] + b[i mod len(b)]) (see cpu.AddSiLU): the
// CPU backend's ResBlock epilogue for proposers' heads outside this module's
// Mat.ResBlock shape (Hydra heads' first block).
func AddSiLU(x, t, b []float32) { cpu.AddSiLU(x, t, b) }
