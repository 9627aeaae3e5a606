package cache_test

import (
	"testing"

	"github.com/specgate/specgate/cache"
	"github.com/specgate/specgate/cache/cachetest"
)

func newMem(t *testing.T) cache.Store { return cache.NewMemStore(nil) }

func newHNSW(t *testing.T, dim int) cache.VectorIndex {
	ix, err := cache.NewHNSW(cache.HNSWConfig{Dim: dim, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	return ix
}

func TestMemStoreContract(t *testing.T) { cachetest.StoreContract(t, newMem) }

func TestHNSWContract(t *testing.T) { cachetest.IndexContract(t, newHNSW) }

func TestTenantIsolationMemHNSW(t *testing.T) { cachetest.TenantIsolation(t, newMem, newHNSW) }
