package cuda

import "github.com/specgate/specgate/kernels"

// Environment switches of the backend (A/B runs of benchmarks). Nothing in
// the backend reads them: a command that honours them maps them into its
// Options with WithEnv, once, at its edge (cmd/specgate, serving.Load).
const (
	EnvAttnTile       = "SPECGATE_ATTN_TILE"       // "0": Options.NoAttnTile
	EnvDeviceSampling = "SPECGATE_DEVICE_SAMPLING" // "0": Options.NoDeviceSampling
	EnvGraphBatched   = "SPECGATE_GRAPH_BATCHED"   // "0": Options.NoGraphBatched
	EnvDeviceHeads    = "SPECGATE_DEVICE_HEADS"    // "0": Options.NoDeviceHeads
	EnvHeadsFused     = "SPECGATE_HEADS_FUSED"     // "0": Options.NoHeadsFused
	EnvExactVerify    = "SPECGATE_EXACT_VERIFY"    // "0": Options.FastVerify
)

// WithEnv returns o with the switches getenv (os.Getenv) sets applied: the
// backend's (a switch can only turn a feature off) and the kernel tuning's
// (kernels.Tuning.WithEnv: SPECGATE_GEMV, SPECGATE_GEMV_I8,
// SPECGATE_GEMV_WARPS, SPECGATE_PDL, ...).
func (o Options) WithEnv(getenv func(string) string) Options {
	off := func(name string) bool { return getenv(name) == "0" }
	o.NoAttnTile = o.NoAttnTile || off(EnvAttnTile)
	o.NoDeviceSampling = o.NoDeviceSampling || off(EnvDeviceSampling)
	o.NoGraphBatched = o.NoGraphBatched || off(EnvGraphBatched)
	o.NoDeviceHeads = o.NoDeviceHeads || off(EnvDeviceHeads)
	o.NoHeadsFused = o.NoHeadsFused || off(EnvHeadsFused)
	o.FastVerify = o.FastVerify || off(EnvExactVerify)
	o.Tuning = o.Tuning.WithEnv(getenv)
	return o
}

// Tuning is the kernel tuning the backend's device runs with (defaults
// filled in).
func (b *Backend) Tuning() kernels.Tuning { return b.dev.Tuning() }
