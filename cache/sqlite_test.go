package cache_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/specgate/specgate/cache"
	"github.com/specgate/specgate/cache/cachetest"
)

func newSQLite(t *testing.T) cache.Store {
	s, err := cache.OpenSQLite(filepath.Join(t.TempDir(), "cache.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSQLiteContract(t *testing.T) { cachetest.StoreContract(t, newSQLite) }

func TestTenantIsolationSQLiteHNSW(t *testing.T) {
	cachetest.TenantIsolation(t, newSQLite, newHNSW)
}

func TestVectorCodec(t *testing.T) {
	v := []float32{1, -2.5, 3e-9, 0}
	b := cache.EncodeVector(v)
	if len(b) != 16 || b[4] != 0 || b[7] != 0xc0 { // -2.5 = 0xc0200000 little-endian
		t.Fatalf("encoding: % x", b)
	}
	got, err := cache.DecodeVector(b)
	if err != nil || fmt.Sprint(got) != fmt.Sprint(v) {
		t.Fatalf("decode: %v %v", got, err)
	}
	if _, err := cache.DecodeVector(b[:5]); !errors.Is(err, cache.ErrCorrupt) {
		t.Fatalf("odd length: got %v, want ErrCorrupt", err)
	}
}

const restartEnv = "SPECGATE_CACHE_RESTART_CHILD"

var restartQs = []string{
	"How do I reverse a list in Python?",
	"What is the capital of Australia?",
	"How many minutes should I boil an egg?",
}

func restartCache(t *testing.T, path string) (*cache.Cache, *cache.SQLiteStore) {
	t.Helper()
	st, err := cache.OpenSQLite(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	emb, _ := cache.NewLexical(0)
	ix, _ := cache.NewHNSW(cache.HNSWConfig{Dim: emb.Dim()})
	c, err := cache.New(cache.DefaultConfig(), st, ix, emb)
	if err != nil {
		t.Fatal(err)
	}
	return c, st
}

// TestSQLiteRestart writes entries in one process (a re-executed test binary)
// and reads them in another: exact and semantic hits survive the restart, and
// the rebuilt eviction state counts them.
func TestSQLiteRestart(t *testing.T) {
	ctx := context.Background()
	if path := os.Getenv(restartEnv); path != "" {
		mode, path, _ := strings.Cut(path, ":")
		c, st := restartCache(t, path)
		defer st.Close()
		defer c.Close()
		for i, q := range restartQs {
			r := &cache.Request{Tenant: "t", Model: "m", Messages: []cache.Message{{Role: "user", Content: q}}}
			switch mode {
			case "write":
				if err := c.Put(ctx, r, []byte(fmt.Sprintf("answer %d", i)), 1); err != nil {
					t.Fatal(err)
				}
			case "read":
				r.Messages[0].Content = strings.ToLower(strings.TrimSuffix(q, "?"))
				l, err := c.Get(ctx, r)
				if err != nil || !l.Hit || l.Tier != cache.TierSemantic || string(l.Response) != fmt.Sprintf("answer %d", i) {
					t.Fatalf("child read %q: %+v %v", q, l, err)
				}
			}
		}
		return
	}
	path := filepath.Join(t.TempDir(), "restart.db")
	run := func(mode string) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestSQLiteRestart$", "-test.v")
		cmd.Env = append(os.Environ(), restartEnv+"="+mode+":"+path)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "PASS") {
			t.Fatalf("child %s: %v\n%s", mode, err, out)
		}
	}
	run("write")
	// This process never wrote: everything comes from the file.
	c, st := restartCache(t, path)
	if n := c.Len(); n != len(restartQs) {
		t.Fatalf("rebuilt entries: got %d, want %d", n, len(restartQs))
	}
	for i, q := range restartQs {
		r := &cache.Request{Tenant: "t", Model: "m", Messages: []cache.Message{{Role: "user", Content: q}}}
		l, err := c.Get(ctx, r)
		if err != nil || !l.Hit || l.Tier != cache.TierExact || string(l.Response) != fmt.Sprintf("answer %d", i) {
			t.Fatalf("after restart, exact %q: %+v %v", q, l, err)
		}
		r.Tenant = "other"
		if l, _ := c.Get(ctx, r); l.Hit {
			t.Fatalf("after restart, tenant other hit %q", q)
		}
	}
	c.Close()
	st.Close()
	run("read") // a third process: semantic hits from the rebuilt index
}
