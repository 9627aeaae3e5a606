package policy

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func simPolicies(c Capacity) map[string]Policy[int] {
	return map[string]Policy[int]{
		"lru":      NewLRU[int](c),
		"fifo":     NewFIFO[int](c),
		"lfu":      NewLFU[int](c),
		"gdsf":     NewGDSF[int](c),
		"s3fifo":   NewS3FIFO[int](c),
		"wtinylfu": NewWTinyLFU[int](c, func(k int) uint64 { return mix64(uint64(k)) }),
	}
}

// checkConsistent drives p with random operations and checks, after every
// step, that it never exceeds c, that every eviction is of a resident key
// (or the key being added) and is reported once, and that Contains, Len and
// Bytes agree with a model built only from the calls and the reported
// evictions. With clock set, p is a TTL wrapper: the clock moves and Sweep
// runs after each step before the exact comparison.
func checkConsistent(t *testing.T, p Policy[int], c Capacity, seed uint64, steps int, clock *time.Time) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	const universe = 64
	model := map[int]int64{}
	apply := func(step int, ev []Eviction[int], adding int) {
		seen := map[int]bool{}
		for _, e := range ev {
			if seen[e.Key] {
				t.Fatalf("step %d: %d evicted twice in one call", step, e.Key)
			}
			seen[e.Key] = true
			if _, ok := model[e.Key]; !ok && e.Key != adding {
				t.Fatalf("step %d: evicted %d which is not resident", step, e.Key)
			}
			if clock == nil && e.Reason != ReasonCapacity {
				t.Fatalf("step %d: reason %v without TTL", step, e.Reason)
			}
			delete(model, e.Key)
		}
	}
	for step := range steps {
		k := rng.IntN(universe)
		switch r := rng.IntN(10); {
		case r < 5:
			size := int64(rng.IntN(30))
			if rng.IntN(50) == 0 {
				size = 1000 // larger than any MaxBytes used
			}
			ev := p.Add(k, size, float64(1+rng.IntN(5)))
			for _, e := range ev {
				if p.Contains(e.Key) {
					t.Fatalf("step %d: Add(%d) reported %d, which is still resident", step, k, e.Key)
				}
			}
			apply(step, ev, k)
			if p.Contains(k) {
				model[k] = size
			} else {
				delete(model, k)
			}
		case r < 9:
			_, in := model[k]
			if got := p.Get(k); got && !in {
				t.Fatalf("step %d: Get(%d) hit a key the model lacks", step, k)
			} else if !got && in && clock == nil {
				t.Fatalf("step %d: Get(%d) missed a resident key", step, k)
			}
		default:
			_, in := model[k]
			if got := p.Remove(k); got != in && clock == nil {
				t.Fatalf("step %d: Remove(%d) = %v, model %v", step, k, got, in)
			}
			delete(model, k)
		}
		if clock != nil {
			*clock = clock.Add(time.Duration(rng.IntN(3)) * time.Second)
			apply(step, p.(Sweeper[int]).Sweep(), -1)
		}
		if c.over(p.Len(), p.Bytes()) {
			t.Fatalf("step %d: Len %d Bytes %d exceed %+v", step, p.Len(), p.Bytes(), c)
		}
		var bytes int64
		for _, s := range model {
			bytes += s
		}
		if p.Len() != len(model) || p.Bytes() != bytes {
			t.Fatalf("step %d: Len %d Bytes %d, model %d %d", step, p.Len(), p.Bytes(), len(model), bytes)
		}
		for q := range universe {
			if _, in := model[q]; p.Contains(q) != in {
				t.Fatalf("step %d: Contains(%d) = %v, model %v", step, q, !in, in)
			}
		}
	}
}

var propCaps = []Capacity{
	{MaxEntries: 10},
	{MaxBytes: 100},
	{MaxEntries: 10, MaxBytes: 100},
	{MaxEntries: 1},
	{MaxEntries: 2, MaxBytes: 30},
	{MaxEntries: 40, MaxBytes: 400},
}

func TestNeverExceedsCapacity(t *testing.T) {
	steps := 20000
	if testing.Short() {
		steps = 2000
	}
	for ci, c := range propCaps {
		for name, p := range simPolicies(c) {
			t.Run(fmt.Sprintf("%s/%+v", name, c), func(t *testing.T) {
				checkConsistent(t, p, c, uint64(ci), steps, nil)
			})
		}
	}
}

func TestTTLConsistent(t *testing.T) {
	steps := 10000
	if testing.Short() {
		steps = 1000
	}
	for ci, c := range propCaps {
		for name, p := range simPolicies(c) {
			t.Run(fmt.Sprintf("%s/%+v", name, c), func(t *testing.T) {
				clock := time.Unix(0, 0)
				w := WithTTL(p, 7*time.Second, func() time.Time { return clock })
				checkConsistent(t, w, c, uint64(ci)+100, steps, &clock)
			})
		}
	}
}

// refQueue is the reference model of LRU (touch) and FIFO: a slice, most
// recent first, scanned linearly.
type refQueue struct {
	c     Capacity
	touch bool
	keys  []int
	sizes map[int]int64
}

func (r *refQueue) bytes() int64 {
	var b int64
	for _, k := range r.keys {
		b += r.sizes[k]
	}
	return b
}

func (r *refQueue) add(k int, size int64) []int {
	i := slices.Index(r.keys, k)
	if r.c.MaxBytes > 0 && size > r.c.MaxBytes {
		if i >= 0 {
			r.keys = slices.Delete(r.keys, i, i+1)
		}
		return []int{k}
	}
	r.sizes[k] = size
	if i < 0 {
		r.keys = slices.Insert(r.keys, 0, k)
	} else if r.touch {
		r.keys = slices.Delete(r.keys, i, i+1)
		r.keys = slices.Insert(r.keys, 0, k)
	}
	var ev []int
	for (r.c.MaxEntries > 0 && len(r.keys) > r.c.MaxEntries) || (r.c.MaxBytes > 0 && r.bytes() > r.c.MaxBytes) {
		last := r.keys[len(r.keys)-1]
		r.keys = r.keys[:len(r.keys)-1]
		ev = append(ev, last)
	}
	return ev
}

func (r *refQueue) get(k int) bool {
	i := slices.Index(r.keys, k)
	if i >= 0 && r.touch {
		r.keys = slices.Delete(r.keys, i, i+1)
		r.keys = slices.Insert(r.keys, 0, k)
	}
	return i >= 0
}

func (r *refQueue) remove(k int) bool {
	i := slices.Index(r.keys, k)
	if i >= 0 {
		r.keys = slices.Delete(r.keys, i, i+1)
	}
	return i >= 0
}

func TestLRUFIFOAgainstReference(t *testing.T) {
	for ci, c := range propCaps {
		for _, touch := range []bool{true, false} {
			var p interface {
				Policy[int]
				Keys() []int
			}
			if touch {
				p = NewLRU[int](c)
			} else {
				p = NewFIFO[int](c)
			}
			ref := &refQueue{c: c, touch: touch, sizes: map[int]int64{}}
			rng := rand.New(rand.NewPCG(uint64(ci), 7))
			for step := range 5000 {
				k := rng.IntN(30)
				switch r := rng.IntN(10); {
				case r < 5:
					size := int64(rng.IntN(30))
					if rng.IntN(40) == 0 {
						size = 500
					}
					var got []int
					for _, e := range p.Add(k, size, 1) {
						got = append(got, e.Key)
					}
					if want := ref.add(k, size); !slices.Equal(got, want) {
						t.Fatalf("touch=%v %+v step %d: Add(%d,%d) evicted %v, want %v", touch, c, step, k, size, got, want)
					}
				case r < 9:
					if got, want := p.Get(k), ref.get(k); got != want {
						t.Fatalf("touch=%v step %d: Get(%d) = %v, want %v", touch, step, k, got, want)
					}
				default:
					if got, want := p.Remove(k), ref.remove(k); got != want {
						t.Fatalf("touch=%v step %d: Remove(%d) = %v, want %v", touch, step, k, got, want)
					}
				}
				if !slices.Equal(p.Keys(), ref.keys) || p.Bytes() != ref.bytes() {
					t.Fatalf("touch=%v step %d: keys %v bytes %d, want %v %d", touch, step, p.Keys(), p.Bytes(), ref.keys, ref.bytes())
				}
			}
		}
	}
}

func randomTrace(rng *rand.Rand, n, keys int) *Trace {
	t := &Trace{Name: "random", Keys: make([]uint64, n)}
	skew := rng.IntN(3)
	for i := range t.Keys {
		k := rng.IntN(keys)
		for range skew { // skew towards small keys
			k = min(k, rng.IntN(keys))
		}
		t.Keys[i] = uint64(k)
	}
	return t
}

func TestBeladyBoundsEveryPolicy(t *testing.T) {
	traces := 200
	if testing.Short() {
		traces = 20
	}
	rng := rand.New(rand.NewPCG(3, 3))
	for i := range traces {
		tr := randomTrace(rng, 300+rng.IntN(700), 5+rng.IntN(100))
		c := 1 + rng.IntN(30)
		opt := Belady(tr, c)
		for _, name := range TableOrder {
			p, err := SimPolicy(name, Capacity{MaxEntries: c})
			if err != nil {
				t.Fatal(err)
			}
			if r := Simulate(p, tr); r.Hits > opt.Hits {
				t.Fatalf("trace %d cap %d: %s has %d hits > Belady %d", i, c, name, r.Hits, opt.Hits)
			}
		}
	}
}

// bruteOptimal is the best hit count by exhaustive search over every
// admission and eviction choice.
func bruteOptimal(keys []uint64, c int) int64 {
	var best func(i int, cache []uint64) int64
	best = func(i int, cache []uint64) int64 {
		if i == len(keys) {
			return 0
		}
		k := keys[i]
		if slices.Contains(cache, k) {
			return 1 + best(i+1, cache)
		}
		b := best(i+1, cache) // bypass
		if len(cache) < c {
			b = max(b, best(i+1, append(slices.Clone(cache), k)))
		} else {
			for j := range cache {
				next := slices.Clone(cache)
				next[j] = k
				b = max(b, best(i+1, next))
			}
		}
		return b
	}
	return best(0, nil)
}

func TestBeladyIsOptimal(t *testing.T) {
	// Hand-worked: a b c b c a with room for 2: a, b enter; c's next use (4)
	// is nearer than a's (5), so c replaces a; b and c hit; a misses → 2.
	if got := Belady(&Trace{Keys: []uint64{1, 2, 3, 2, 3, 1}}, 2).Hits; got != 2 {
		t.Fatalf("hand trace: %d hits, want 2", got)
	}
	// a b a c a b with room for 1: keep a through its reuses: 2 hits.
	if got := Belady(&Trace{Keys: []uint64{1, 2, 1, 3, 1, 2}}, 1).Hits; got != 2 {
		t.Fatalf("hand trace 2: %d hits, want 2", got)
	}
	rng := rand.New(rand.NewPCG(5, 5))
	for i := range 300 {
		tr := randomTrace(rng, 4+rng.IntN(9), 2+rng.IntN(5))
		c := 1 + rng.IntN(3)
		if got, want := Belady(tr, c).Hits, bruteOptimal(tr.Keys, c); got != want {
			t.Fatalf("trace %d %v cap %d: Belady %d hits, optimum %d", i, tr.Keys, c, got, want)
		}
	}
}
