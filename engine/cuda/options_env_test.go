package cuda

import "testing"

// The environment switches only turn features off, and only through Options.
func TestOptionsWithEnv(t *testing.T) {
	t.Setenv(EnvAttnTile, "0")
	t.Setenv(EnvDeviceSampling, "1")
	t.Setenv(EnvGraphBatched, "")
	o := Options{NoGraphBatched: true}.withEnv()
	if !o.NoAttnTile || o.NoDeviceSampling || !o.NoGraphBatched {
		t.Fatalf("withEnv: %+v", o)
	}
	t.Setenv(EnvAttnTile, "")
	t.Setenv(EnvDeviceSampling, "0")
	if o := (Options{}).withEnv(); o.NoAttnTile || !o.NoDeviceSampling || o.NoGraphBatched {
		t.Fatalf("withEnv: %+v", o)
	}
	if o := (Options{}).withEnv(); o.NoDeviceHeads || o.NoHeadsFused || o.FastVerify {
		t.Fatalf("withEnv without heads/exact switches: %+v", o)
	}
	t.Setenv(EnvDeviceHeads, "0")
	t.Setenv(EnvHeadsFused, "0")
	t.Setenv(EnvExactVerify, "0")
	if o := (Options{}).withEnv(); !o.NoDeviceHeads || !o.NoHeadsFused || !o.FastVerify {
		t.Fatalf("withEnv with heads/exact switches: %+v", o)
	}
	t.Setenv(EnvExactVerify, "1")
	if o := (Options{FastVerify: true}).withEnv(); !o.FastVerify {
		t.Fatalf("withEnv dropped Options.FastVerify: %+v", o)
	}
	if o := (Options{}).withEnv(); o.FastVerify {
		t.Fatalf("SPECGATE_EXACT_VERIFY=1 set FastVerify: %+v", o)
	}
}
