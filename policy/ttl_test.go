package policy

import (
	"slices"
	"sync"
	"testing"
	"time"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func evictions(ev []Eviction[string]) []string {
	var s []string
	for _, e := range ev {
		s = append(s, e.Key+":"+e.Reason.String())
	}
	return s
}

func TestTTLExpiry(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	p := WithTTL[string](NewLRU[string](Capacity{MaxEntries: 10}), 10*time.Second, clk.now)

	p.Add("a", 1, 1) // live [0s, 10s)
	clk.advance(5 * time.Second)
	p.Add("b", 1, 1) // live [5s, 15s)
	clk.advance(4 * time.Second)
	if !p.Get("a") { // 9s
		t.Fatal("a expired early")
	}
	clk.advance(time.Second) // 10s: a's deadline, expired (half-open lifetime)
	if p.Contains("a") || p.Get("a") {
		t.Fatal("a still live at its deadline")
	}
	if !p.Contains("b") {
		t.Fatal("b expired early")
	}
	if p.Len() != 1 { // Get removed a from the inner policy
		t.Fatalf("Len %d, want 1", p.Len())
	}
	clk.advance(2 * time.Second) // 12s
	ev := p.Add("c", 1, 1)       // reports a (found by Get); b still live
	if got := evictions(ev); !slices.Equal(got, []string{"a:ttl"}) {
		t.Fatalf("Add evicted %v, want [a:ttl]", got)
	}
	clk.advance(3 * time.Second) // 15s: b expires; nobody looked at it
	if p.Len() != 2 {
		t.Fatalf("Len %d before Sweep, want 2 (b not yet swept)", p.Len())
	}
	if got := evictions(p.Sweep()); !slices.Equal(got, []string{"b:ttl"}) {
		t.Fatalf("Sweep = %v, want [b:ttl]", got)
	}
	if got := p.Sweep(); len(got) != 0 {
		t.Fatalf("second Sweep = %v, want nothing", got)
	}

	// Add refreshes the deadline.
	p.Add("c", 1, 1) // 15s → live until 25s
	clk.advance(9 * time.Second)
	if !p.Get("c") {
		t.Fatal("refreshed c expired")
	}
	// Per-entry lifetimes and never-expiring entries.
	p.AddTTL("short", 1, 1, 500*time.Millisecond) // 24s → 24.5s, before c's 25s
	p.AddTTL("forever", 1, 1, 0)
	if _, ok := p.Deadline("forever"); ok {
		t.Fatal("forever has a deadline")
	}
	clk.advance(time.Hour)
	if got := evictions(p.Sweep()); !slices.Equal(got, []string{"short:ttl", "c:ttl"}) {
		t.Fatalf("Sweep = %v, want [short:ttl c:ttl] (earliest deadline first)", got)
	}
	if !p.Get("forever") {
		t.Fatal("forever expired")
	}
	// Re-adding an expired key replaces it: the old entry's expiry is not
	// reported, since the caller would delete the new one.
	p.Add("r", 1, 1)
	clk.advance(time.Minute)
	if p.Get("r") {
		t.Fatal("r live after its deadline")
	}
	if got := p.Add("r", 1, 1); len(got) != 0 || !p.Contains("r") {
		t.Fatalf("re-adding expired r reported %v", evictions(got))
	}
	p.Add("s", 1, 1)
	clk.advance(time.Minute) // s expired, not yet swept
	if got := p.Add("s", 1, 1); !slices.Equal(evictions(got), []string{"r:ttl"}) || !p.Contains("s") {
		t.Fatalf("re-adding expired s reported %v, want [r:ttl]", evictions(got))
	}
	// Explicit removal forgets the deadline.
	p.Remove("s")
	p.Add("d", 1, 1)
	if !p.Remove("d") || p.Remove("d") {
		t.Fatal("Remove")
	}
	clk.advance(time.Hour)
	if got := p.Sweep(); len(got) != 0 {
		t.Fatalf("removed key swept: %v", got)
	}
}

func TestTTLComposesWithCapacity(t *testing.T) {
	clk := &fakeClock{t: time.Unix(0, 0)}
	p := WithTTL[string](NewFIFO[string](Capacity{MaxEntries: 2}), time.Minute, clk.now)
	p.Add("a", 1, 1)
	clk.advance(30 * time.Second)
	p.Add("b", 1, 1) // deadline 90s
	clk.advance(10 * time.Second)
	// c (deadline 100s) pushes a out by capacity; a's deadline must go with it.
	if got := evictions(p.Add("c", 1, 1)); !slices.Equal(got, []string{"a:capacity"}) {
		t.Fatalf("Add(c) = %v, want [a:capacity]", got)
	}
	if _, ok := p.Deadline("a"); ok {
		t.Fatal("a's deadline outlived its eviction")
	}
	clk.advance(20 * time.Second) // 60s: a would expire now; only a was due
	if got := p.Sweep(); len(got) != 0 {
		t.Fatalf("Sweep = %v, want nothing", evictions(got))
	}
	// At 90s b expires; the expired entry is removed before d is added, so
	// d costs no capacity eviction.
	clk.advance(30 * time.Second)
	if got := evictions(p.Add("d", 1, 1)); !slices.Equal(got, []string{"b:ttl"}) {
		t.Fatalf("Add(d) = %v, want [b:ttl]", got)
	}
	// A key the inner policy refuses gets no deadline.
	q := WithTTL[string](NewLRU[string](Capacity{MaxBytes: 5}), time.Minute, clk.now)
	if got := evictions(q.Add("big", 6, 1)); !slices.Equal(got, []string{"big:capacity"}) {
		t.Fatalf("oversized = %v", got)
	}
	if _, ok := q.Deadline("big"); ok {
		t.Fatal("refused key has a deadline")
	}
}

func TestSynchronized(t *testing.T) {
	clk := time.Unix(0, 0)
	var mu sync.Mutex
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clk }
	s := Synchronized[int](WithTTL[int](NewS3FIFO[int](Capacity{MaxEntries: 100}), time.Second, now))
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				k := (i * (g + 1)) % 300
				s.Do(func(p Policy[int]) {
					if !p.Get(k) {
						p.Add(k, 1, 1)
					}
				})
				if i%100 == 0 {
					s.Sweep()
				}
				s.Contains(k)
				if s.Len() > 100 {
					t.Errorf("Len %d > 100", s.Len())
				}
			}
		}()
	}
	wg.Wait()
	mu.Lock()
	clk = clk.Add(time.Hour)
	mu.Unlock()
	n := s.Len()
	if got := len(s.Sweep()); got != n || s.Len() != 0 || s.Bytes() != 0 {
		t.Fatalf("Sweep after expiry removed %d of %d; Len %d", got, n, s.Len())
	}
	if Synchronized[int](NewLRU[int](Capacity{})).Sweep() != nil {
		t.Fatal("Sweep without a Sweeper returned evictions")
	}
}
