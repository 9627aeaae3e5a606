package redisstore

import (
	"testing"

	"github.com/specgate/specgate/cache"
	"github.com/specgate/specgate/cache/cachetest"
)

func TestStoreContract(t *testing.T) {
	cachetest.StoreContract(t, func(t *testing.T) cache.Store {
		s, _, _ := newTestStore(t)
		return s
	})
}

func TestIndexContract(t *testing.T) {
	cachetest.IndexContract(t, func(t *testing.T, dim int) cache.VectorIndex {
		rdb, prefix := testClient(t)
		return newTestIndex(t, rdb, prefix, dim)
	})
}

// TestPipelineTenantIsolation runs the whole cache pipeline over the Redis
// store and the Redis vector index.
func TestPipelineTenantIsolation(t *testing.T) {
	rdb, prefix := testClient(t)
	cachetest.TenantIsolation(t,
		func(t *testing.T) cache.Store {
			s, err := New(rdb, Options{Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		func(t *testing.T, dim int) cache.VectorIndex { return newTestIndex(t, rdb, prefix, dim) })
}
