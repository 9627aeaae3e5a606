package milvusstore

import (
	"testing"

	"github.com/specgate/specgate/cache"
	"github.com/specgate/specgate/cache/cachetest"
)

// The contract runs against the FAKE in-process Milvus of fake_server_test.go.
func TestIndexContract(t *testing.T) {
	cachetest.IndexContract(t, func(t *testing.T, dim int) cache.VectorIndex {
		_, addr := startFakeMilvus(t)
		return newTestIndex(t, addr, dim)
	})
}

// TestPipelineTenantIsolation runs the whole cache pipeline with the Milvus
// index (fake server) and the in-memory store.
func TestPipelineTenantIsolation(t *testing.T) {
	_, addr := startFakeMilvus(t)
	cachetest.TenantIsolation(t,
		func(t *testing.T) cache.Store { return cache.NewMemStore(nil) },
		func(t *testing.T, dim int) cache.VectorIndex { return newTestIndex(t, addr, dim) })
}
