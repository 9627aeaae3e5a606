package main

import "github.com/specgate/specgate/policy"

// bench-policy: hit ratios of every eviction policy against Belady's
// offline optimum on generated (and optional file) traces; the table in
// docs/policy.md comes from `go run ./cmd/specgate bench-policy`.
func init() {
	register("bench-policy", "eviction-policy hit ratios vs Belady (docs/policy.md table)", policy.PolicyBench)
}
