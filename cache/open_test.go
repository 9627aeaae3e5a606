package cache_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/specgate/specgate/cache"
)

func TestOpenDefaultSnapshot(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "c.db")
	d, err := cache.OpenDefault(path, cache.DefaultConfig(), 128)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Put(ctx, user("t", "How do I boil an egg?"), []byte("10 min"), 1); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + ".hnsw"); err != nil {
		t.Fatalf("snapshot not written: %v", err)
	}
	d, err = cache.OpenDefault(path, cache.DefaultConfig(), 128)
	if err != nil {
		t.Fatal(err)
	}
	if d.Index.Len("") != 1 {
		t.Fatalf("index after reopen has %d vectors", d.Index.Len(""))
	}
	if l, _ := d.Get(ctx, user("t", "how do i boil an egg")); !l.Hit || string(l.Response) != "10 min" {
		t.Fatalf("semantic hit after reopen: %+v", l)
	}
	// A corrupt snapshot is replaced by a rebuild from the store.
	d.Close()
	os.WriteFile(path+".hnsw", []byte("garbage"), 0o600)
	d, err = cache.OpenDefault(path, cache.DefaultConfig(), 128)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Index.Len("") != 1 {
		t.Fatalf("index after corrupt snapshot has %d vectors", d.Index.Len(""))
	}
}
