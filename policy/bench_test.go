package policy

import (
	"testing"
)

const benchCap = 10_000

// BenchmarkGet: Get hits on a full cache of 10k keys (one op = one Get).
func BenchmarkGet(b *testing.B) {
	for name, p := range simPolicies(Capacity{MaxEntries: benchCap}) {
		b.Run(name, func(b *testing.B) {
			for i := range benchCap {
				p.Get(i)
				p.Add(i, 1, 1)
			}
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				p.Get(i % benchCap)
			}
		})
	}
}

// BenchmarkAdd: Add of ever-new keys into a full cache of 10k keys, so
// every op evicts (one op = one Add).
func BenchmarkAdd(b *testing.B) {
	for name, p := range simPolicies(Capacity{MaxEntries: benchCap}) {
		b.Run(name, func(b *testing.B) {
			for i := range benchCap {
				p.Add(i, 1, 1)
			}
			b.ResetTimer()
			for i := benchCap; b.Loop(); i++ {
				p.Add(i, 1, 1)
			}
		})
	}
}

// BenchmarkRequest: Get, and Add on a miss, over a Zipf(1.0) trace of 100k
// keys with room for 1% of them (one op = one request).
func BenchmarkRequest(b *testing.B) {
	tr := ZipfTrace(100_000, 1<<20, 1.0, 1)
	for name, p := range simPolicies(Capacity{MaxEntries: 1000}) {
		b.Run(name, func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				k := int(tr.Keys[i&(1<<20-1)])
				if !p.Get(k) {
					p.Add(k, 1, 1)
				}
			}
		})
	}
	b.Run("ttl+lru", func(b *testing.B) {
		p := WithTTL[int](NewLRU[int](Capacity{MaxEntries: 1000}), 1<<62, nil)
		for i := 0; b.Loop(); i++ {
			k := int(tr.Keys[i&(1<<20-1)])
			if !p.Get(k) {
				p.Add(k, 1, 1)
			}
		}
	})
	b.Run("sync+lru", func(b *testing.B) {
		p := Synchronized[int](NewLRU[int](Capacity{MaxEntries: 1000}))
		for i := 0; b.Loop(); i++ {
			k := int(tr.Keys[i&(1<<20-1)])
			if !p.Get(k) {
				p.Add(k, 1, 1)
			}
		}
	})
}

// BenchmarkBelady: the offline optimum on a 1M-request Zipf trace, 1% room.
func BenchmarkBelady(b *testing.B) {
	tr := ZipfTrace(100_000, 1_000_000, 1.0, 1)
	for b.Loop() {
		Belady(tr, 1000)
	}
}
