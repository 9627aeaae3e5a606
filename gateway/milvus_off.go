//go:build !milvus

package gateway

import (
	"errors"

	"github.com/specgate/specgate/cache"
)

// The default build leaves the Milvus client out: its module graph (etcd,
// gRPC, OpenTelemetry, ...) would dominate the first `go run`'s download
// and build. `go build -tags milvus ./cmd/specgate` (and the Docker image)
// include it.

var errNoMilvus = errors.New("this specgate was built without Milvus support: build it with `go build -tags milvus ./cmd/specgate` (the Docker image has it), or use cache.index hnsw or redis")

func dialMilvus(addr, collection string, dim int) (cache.VectorIndex, func(), error) {
	return nil, nil, errNoMilvus
}

// MilvusSupport reports why cache.index milvus cannot be used.
func MilvusSupport() error { return errNoMilvus }
