//go:build milvus

package gateway

import (
	"context"
	"time"

	"github.com/milvus-io/milvus/client/v2/milvusclient"

	"github.com/specgate/specgate/cache"
	"github.com/specgate/specgate/cache/milvusstore"
)

// MilvusSupport reports why cache.index milvus cannot be used (nil: it can;
// this binary was built with -tags milvus).
func MilvusSupport() error { return nil }

// dialMilvus connects the Milvus vector index of cache.index milvus.
func dialMilvus(addr, collection string, dim int) (cache.VectorIndex, func(), error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ix, err := milvusstore.Dial(ctx, &milvusclient.ClientConfig{Address: addr}, milvusstore.IndexOptions{Prefix: collection, Dim: dim})
	if err != nil {
		return nil, nil, err
	}
	return ix, func() { _ = ix.Close() }, nil
}
