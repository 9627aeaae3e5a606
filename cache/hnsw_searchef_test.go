package cache_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
)

// SearchEf with ef <= 0 is Search: the configured (or size-chosen)
// efSearch, not a candidate list of k.
func TestHNSWSearchEfDefault(t *testing.T) {
	ix, _ := buildIndex(t, 3000, 16, 11)
	r := rand.New(rand.NewPCG(12, 7))
	differ := 0
	const n = 200
	for range n {
		q := randUnit(r, 16)
		a, err := ix.Search(context.Background(), "ns", q, 1)
		if err != nil {
			t.Fatal(err)
		}
		for _, ef := range []int{0, -1} {
			b, err := ix.SearchEf(context.Background(), "ns", q, 1, ef)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(a) != fmt.Sprint(b) {
				differ++
			}
		}
	}
	t.Logf("%d of %d SearchEf(ef 0 / -1) results differ from Search's", differ, 2*n)
	if differ != 0 {
		t.Errorf("%d of %d SearchEf(ef <= 0) results differ from Search's (efSearch %d)", differ, 2*n, ix.EfSearchFor("ns"))
	}
}
