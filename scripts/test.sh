#!/usr/bin/env bash
# The test command of the README: `./scripts/test.sh` (and what .ci/run runs).
#   - starts a real Redis (installs redis-server from apt when none answers)
#   - installs the Node.js references (llama.cpp, OpenAI SDK, LangChain) into
#     tools/node/node_modules when node is present (cached; scripts/node-peers.sh)
#   - gofmt and go vet must be clean
#   - go test -short ./... (the long acceptance runs: see README "Benchmarks and long checks"),
#     then the SIMD packages with AVX-512 and AVX2 switched off (GODEBUG)
set -euo pipefail
cd "$(dirname "$0")/.."
export GOFLAGS="${GOFLAGS:-}"
bash .ci/redis.sh
bash scripts/node-peers.sh
unformatted=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change:"; echo "$unformatted"; exit 1
fi
go vet ./...
go vet -tags milvus ./cmd/specgate/ # Milvus support is behind a build tag (milvus.go)
go test -short -count=1 -timeout 20m ./...
# the SIMD packages again as on a CPU without AVX-512 (VNNI), then without
# AVX2/FMA either: their feature gates must pick the portable kernels and
# give the same results (golang.org/x/sys/cpu reads these GODEBUG switches)
GODEBUG=cpu.avx512f=off go test -short -count=1 ./vecmath/ ./cache/
GODEBUG=cpu.avx512f=off,cpu.avx2=off,cpu.fma=off go test -short -count=1 ./vecmath/ ./engine/cpu/
