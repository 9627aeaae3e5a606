package cache_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/specgate/specgate/cache"
)

// BenchmarkGetSwappedHalves is the guard's denial-of-service case through
// the public path: a tenant stores one entry whose key is n bytes of
// distinct words, then looks up the same key with its halves swapped (a
// semantic candidate: same words, so the guard runs on it). It uses only
// the public API, so it also runs on older code for a before/after.
func BenchmarkGetSwappedHalves(b *testing.B) {
	ctx := context.Background()
	for _, size := range []int{2200, 4600, 9400, 32 << 10} {
		var ws []string
		for i, n := 0, 0; n < size-40; i++ {
			w := "w" + strconv.FormatInt(int64(i), 36) + "q"
			w = strings.Map(func(r rune) rune {
				if r >= '0' && r <= '9' {
					return 'g' + (r - '0') // letters only: no numbers
				}
				return r
			}, w)
			ws = append(ws, w)
			n += len(w) + 1
		}
		h := len(ws) / 2
		a := strings.Join(ws, " ")
		sw := strings.Join(append(append([]string{}, ws[h:]...), ws[:h]...), " ")
		emb, err := cache.NewLexical(0)
		if err != nil {
			b.Fatal(err)
		}
		ix, err := cache.NewHNSW(cache.HNSWConfig{Dim: emb.Dim(), Seed: 1})
		if err != nil {
			b.Fatal(err)
		}
		c, err := cache.New(cache.DefaultConfig(), cache.NewMemStore(nil), ix, emb, cache.WithoutRebuild())
		if err != nil {
			b.Fatal(err)
		}
		req := func(s string) *cache.Request {
			return &cache.Request{Tenant: "t", Model: "m", Messages: []cache.Message{{Role: "user", Content: s}}}
		}
		if err := c.Put(ctx, req(a), []byte(`{"choices":[]}`), 0); err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("%dB", len(sw)), func(b *testing.B) {
			for b.Loop() {
				l, err := c.Get(ctx, req(sw))
				if err != nil {
					b.Fatal(err)
				}
				if l.Tier == cache.TierExact {
					b.Fatal("exact hit on the swapped key")
				}
			}
		})
		c.Close()
	}
}
