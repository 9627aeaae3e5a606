package cuda

import "os"

// Environment switches of the backend (A/B runs of benchmarks). They are
// read once, in New, into the backend's Options: no other code of the
// backend reads the environment or a tuning global.
const (
	EnvAttnTile       = "SPECGATE_ATTN_TILE"       // "0": Options.NoAttnTile
	EnvDeviceSampling = "SPECGATE_DEVICE_SAMPLING" // "0": Options.NoDeviceSampling
	EnvGraphBatched   = "SPECGATE_GRAPH_BATCHED"   // "0": Options.NoGraphBatched
	EnvDeviceHeads    = "SPECGATE_DEVICE_HEADS"    // "0": Options.NoDeviceHeads
	EnvHeadsFused     = "SPECGATE_HEADS_FUSED"     // "0": Options.NoHeadsFused
	EnvExactVerify    = "SPECGATE_EXACT_VERIFY"    // "0": Options.FastVerify
)

// withEnv returns o with the environment's switches applied (a switch can
// only turn a feature off).
func (o Options) withEnv() Options {
	off := func(name string) bool { return os.Getenv(name) == "0" }
	o.NoAttnTile = o.NoAttnTile || off(EnvAttnTile)
	o.NoDeviceSampling = o.NoDeviceSampling || off(EnvDeviceSampling)
	o.NoGraphBatched = o.NoGraphBatched || off(EnvGraphBatched)
	o.NoDeviceHeads = o.NoDeviceHeads || off(EnvDeviceHeads)
	o.NoHeadsFused = o.NoHeadsFused || off(EnvHeadsFused)
	o.FastVerify = o.FastVerify || off(EnvExactVerify)
	return o
}
