package cache

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// cache.db holds every tenant's prompts: it and its WAL files are created
// readable by the owner only (they were 0644).
func TestSQLiteFileMode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache.db")
	st, err := OpenSQLite(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Put(context.Background(), &Entry{ID: "a", Namespace: "n", Key: "k", Response: []byte("r"), CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if m := fi.Mode().Perm(); m&0o077 != 0 {
			t.Errorf("%s mode %v, want no group or other access", filepath.Base(p), m)
		}
	}
}
