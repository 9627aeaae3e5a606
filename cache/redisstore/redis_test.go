package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
)

// testClient connects to the Redis of REDIS_ADDR (default 127.0.0.1:6379;
// start one with .ci/redis.sh) and returns a key prefix unique to this test.
// When Redis is unreachable the test fails, unless SPECGATE_SKIP_REDIS=1.
// All keys under the prefix are deleted at cleanup.
func testClient(t testing.TB) (*redis.Client, string) {
	t.Helper()
	if os.Getenv("SPECGATE_SKIP_REDIS") == "1" {
		t.Skip("SPECGATE_SKIP_REDIS=1")
	}
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	ctx := context.Background()
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		t.Fatalf("redis at %s unreachable (%v): run .ci/redis.sh or set SPECGATE_SKIP_REDIS=1", addr, err)
	}
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	prefix := "specgate-test-" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		var cursor uint64
		for {
			keys, next, err := rdb.Scan(ctx, cursor, globEscape(prefix)+":*", 500).Result()
			if err != nil {
				t.Errorf("cleanup scan: %v", err)
				break
			}
			if len(keys) > 0 {
				rdb.Del(ctx, keys...)
			}
			if next == 0 {
				break
			}
			cursor = next
		}
		_ = rdb.Close()
	})
	return rdb, prefix
}

// prefixKeys lists every key under prefix.
func prefixKeys(t testing.TB, rdb *redis.Client, prefix string) []string {
	t.Helper()
	var out []string
	var cursor uint64
	for {
		keys, next, err := rdb.Scan(context.Background(), cursor, globEscape(prefix)+":*", 500).Result()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, keys...)
		if next == 0 {
			return out
		}
		cursor = next
	}
}
