package cache

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

// FuzzHNSWLoad: Load of any bytes either fails or gives an index whose
// searches (int8 upper-layer slots, layer 0, re-scoring) and inserts run
// without panicking. Seeds: snapshots of small int8 and float32 graphs
// with several layers and tombstones, and their truncations.
func FuzzHNSWLoad(f *testing.F) {
	for _, dim := range []int{4, 128} {
		h, _ := NewHNSW(HNSWConfig{Dim: dim, M: 2, EfConstruction: 8, Seed: 7})
		r := rand.New(rand.NewPCG(uint64(dim), 1))
		for i := range 40 {
			_ = h.Add(f.Context(), "ns", fmt.Sprint(i), upperTestVec(r, dim, dim > 8))
		}
		_ = h.Remove(f.Context(), "ns", "3")
		var buf bytes.Buffer
		if err := h.Save(&buf); err != nil {
			f.Fatal(err)
		}
		b := buf.Bytes()
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, dim := range []int{4, 128} {
			h, _ := NewHNSW(HNSWConfig{Dim: dim, M: 2, EfConstruction: 8, Seed: 7})
			if err := h.Load(bytes.NewReader(data)); err != nil {
				continue
			}
			r := rand.New(rand.NewPCG(3, 3))
			for range 4 {
				q := upperTestVec(r, dim, false)
				if _, err := h.Search(t.Context(), "ns", q, 3); err != nil {
					t.Fatal(err)
				}
			}
			_ = h.Add(t.Context(), "ns", "fuzz-new", upperTestVec(r, dim, false))
			_, _ = h.Search(t.Context(), "ns", upperTestVec(r, dim, false), 3)
		}
	})
}
