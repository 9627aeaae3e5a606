package policy

import (
	"errors"
	"slices"
	"testing"
)

// op is one step of a scripted sequence: 'a' Add, 'g' Get (want = expected
// result), 'r' Remove.
type op struct {
	kind byte
	key  string
	size int64
	cost float64
	want bool
}

func add(k string) op { return op{kind: 'a', key: k, size: 1, cost: 1} }
func addSC(k string, size int64, cost float64) op {
	return op{kind: 'a', key: k, size: size, cost: cost}
}
func get(k string, want bool) op { return op{kind: 'g', key: k, want: want} }
func rem(k string, want bool) op { return op{kind: 'r', key: k, want: want} }

// run applies ops to p and returns every evicted key, in order.
func run(t *testing.T, p Policy[string], ops []op) []string {
	t.Helper()
	var out []string
	for i, o := range ops {
		switch o.kind {
		case 'a':
			for _, e := range p.Add(o.key, o.size, o.cost) {
				if e.Reason != ReasonCapacity {
					t.Fatalf("op %d: eviction %v has reason %v", i, e.Key, e.Reason)
				}
				out = append(out, e.Key)
			}
		case 'g':
			if got := p.Get(o.key); got != o.want {
				t.Fatalf("op %d: Get(%q) = %v, want %v", i, o.key, got, o.want)
			}
		case 'r':
			if got := p.Remove(o.key); got != o.want {
				t.Fatalf("op %d: Remove(%q) = %v, want %v", i, o.key, got, o.want)
			}
		}
	}
	return out
}

func residents(p Policy[string], universe []string) []string {
	var r []string
	for _, k := range universe {
		if p.Contains(k) {
			r = append(r, k)
		}
	}
	return r
}

var letters = []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "x", "y", "z", "w"}

// The expected sequences below were worked out by hand from each
// algorithm's definition (comments show the state after each step).
func TestEvictionOrder(t *testing.T) {
	cases := []struct {
		name     string
		p        Policy[string]
		ops      []op
		wantEv   []string
		wantLive []string
	}{
		{
			name: "lru",
			p:    NewLRU[string](Capacity{MaxEntries: 3}),
			ops: []op{
				add("a"), add("b"), add("c"), // MRU→LRU: c b a
				get("a", true), // a c b
				add("d"),       // d a c b → evict b
				get("c", true), // c d a
				add("e"),       // e c d a → evict a
				add("d"),       // update moves d: d e c
				add("f"),       // f d e c → evict c
				get("b", false),
			},
			wantEv:   []string{"b", "a", "c"},
			wantLive: []string{"d", "e", "f"},
		},
		{
			name: "fifo",
			p:    NewFIFO[string](Capacity{MaxEntries: 3}),
			ops: []op{
				add("a"), add("b"), add("c"),
				get("a", true), // no reorder
				add("d"),       // evict a (first in)
				add("b"),       // update, no reorder: queue still b c d
				add("e"),       // evict b
				add("f"),       // evict c
			},
			wantEv:   []string{"a", "b", "c"},
			wantLive: []string{"d", "e", "f"},
		},
		{
			name: "lfu",
			p:    NewLFU[string](Capacity{MaxEntries: 3}),
			ops: []op{
				add("a"), add("b"), add("c"), // a1 b1 c1
				get("a", true), get("a", true), // a3
				get("b", true), // b2
				add("d"),       // lowest count 1: only c → evict c; d1
				add("e"),       // lowest count 1: only d → evict d; e1
				get("e", true), // e2, touched after b
				add("f"),       // count 2: b (older) and e → evict b
			},
			wantEv:   []string{"c", "d", "b"},
			wantLive: []string{"a", "e", "f"},
		},
		{
			name: "lfu-ties-by-recency",
			p:    NewLFU[string](Capacity{MaxEntries: 2}),
			ops: []op{
				add("x"), add("y"), // both 1, x older
				add("z"),                       // evict x
				get("y", true), get("z", true), // y2 then z2: y older
				add("w"), // room first: both count 2, y least recent → evict y
			},
			wantEv:   []string{"x", "y"},
			wantLive: []string{"z", "w"}, // in the order of letters
		},
		{
			name: "gdsf",
			p:    NewGDSF[string](Capacity{MaxEntries: 2}),
			ops: []op{
				addSC("a", 1, 4), // H = 0 + 4/1 = 4
				addSC("b", 2, 2), // H = 0 + 2/2 = 1
				addSC("c", 1, 1), // evict b (H 1), L = 1; c: H = 1 + 1 = 2
				get("c", true),   // c: freq 2, H = 1 + 2*1/1 = 3
				addSC("d", 1, 8), // min is c (3) < a (4): evict c, L = 3; d: H = 11
				addSC("e", 4, 4), // evict a (4), L = 4; e: H = 4 + 1 = 5
			},
			wantEv:   []string{"b", "c", "a"},
			wantLive: []string{"d", "e"},
		},
		{
			name: "gdsf-bytes",
			p:    NewGDSF[string](Capacity{MaxBytes: 10}),
			ops: []op{
				addSC("x", 5, 5),    // H 1
				addSC("y", 5, 50),   // H 10
				addSC("z", 5, 10),   // needs 5 bytes: evict x (1), L = 1; z: H = 1 + 2 = 3
				addSC("w", 10, 100), // needs 10 bytes: evict z (3), then y (10); L = 10
			},
			wantEv:   []string{"x", "z", "y"},
			wantLive: []string{"w"},
		},
		{
			// MaxEntries 4: S holds 1, M holds 3, G remembers 3 keys.
			name: "s3fifo",
			p:    NewS3FIFO[string](Capacity{MaxEntries: 4}),
			ops: []op{
				add("a"), add("b"), add("c"), add("d"), // S: d c b a
				get("a", true), get("c", true), // a, c accessed
				add("e"), // S full: a (accessed) → M; b → evicted, G: b. S: e d c, M: a
				add("f"), // c → M; d evicted, G: d b. S: f e, M: c a
				add("b"), // e evicted, G: e d b; b is a ghost → M: b c a, G: e d
				get("a", true),
				add("g"), // f evicted, G: f e d. S: g
				add("h"), // g evicted, G: g f e (d falls out). S: h
				get("h", true),
				add("i"), // h → M (h b c a), S empty; M: a (accessed) reinserted
				//           with counter 0 (a h b c), c evicted. S: i
			},
			wantEv:   []string{"b", "d", "e", "f", "g", "c"},
			wantLive: []string{"a", "b", "h", "i"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := run(t, tc.p, tc.ops)
			if !slices.Equal(got, tc.wantEv) {
				t.Errorf("evicted %v, want %v", got, tc.wantEv)
			}
			live := residents(tc.p, letters)
			if !slices.Equal(live, tc.wantLive) {
				t.Errorf("resident %v, want %v", live, tc.wantLive)
			}
			if tc.p.Len() != len(tc.wantLive) {
				t.Errorf("Len %d, want %d", tc.p.Len(), len(tc.wantLive))
			}
		})
	}
}

func TestLRUFIFOKeysOrder(t *testing.T) {
	l := NewLRU[string](Capacity{MaxEntries: 4})
	f := NewFIFO[string](Capacity{MaxEntries: 4})
	for _, p := range []Policy[string]{l, f} {
		run(t, p, []op{add("a"), add("b"), add("c"), get("a", true), add("b")})
	}
	if got, want := l.Keys(), []string{"b", "a", "c"}; !slices.Equal(got, want) {
		t.Errorf("LRU keys %v, want %v", got, want)
	}
	if got, want := f.Keys(), []string{"c", "b", "a"}; !slices.Equal(got, want) {
		t.Errorf("FIFO keys %v, want %v", got, want)
	}
}

func TestS3FIFOQueues(t *testing.T) {
	p := NewS3FIFO[string](Capacity{MaxEntries: 4})
	// Same script as the s3fifo case of TestEvictionOrder.
	run(t, p, []op{add("a"), add("b"), add("c"), add("d"), get("a", true), get("c", true),
		add("e"), add("f"), add("b"), get("a", true), add("g"), add("h"), get("h", true), add("i")})
	s, m, g := p.Queues()
	if !slices.Equal(s, []string{"i"}) || !slices.Equal(m, []string{"a", "h", "b"}) || !slices.Equal(g, []string{"g", "f", "e"}) {
		t.Fatalf("queues S=%v M=%v G=%v, want S=[i] M=[a h b] G=[g f e]", s, m, g)
	}
	// Re-adding f: room is made first (i, not accessed, leaves S for G,
	// which drops e), then f is found in G and enters M.
	if ev := p.Add("f", 1, 1); len(ev) != 1 || ev[0].Key != "i" {
		t.Fatalf("re-adding f evicted %v, want [i]", ev)
	}
	s, m, g = p.Queues()
	if len(s) != 0 || !slices.Equal(m, []string{"f", "a", "h", "b"}) || !slices.Equal(g, []string{"i", "g"}) {
		t.Fatalf("after f: S=%v M=%v G=%v, want S=[] M=[f a h b] G=[i g]", s, m, g)
	}
	// d fell out of G long ago: it enters S; S is empty, so M evicts its
	// oldest unaccessed key, b.
	if ev := p.Add("d", 1, 1); len(ev) != 1 || ev[0].Key != "b" {
		t.Fatalf("adding d evicted %v, want [b]", ev)
	}
	s, m, _ = p.Queues()
	if !slices.Equal(s, []string{"d"}) || !slices.Equal(m, []string{"f", "a", "h"}) {
		t.Fatalf("after d: S=%v M=%v, want S=[d] M=[f a h]", s, m)
	}
}

func TestWTinyLFUAdmission(t *testing.T) {
	// MaxEntries 10: window 1, main 9 (protected at most 8). The sketch sees
	// every Get (hit or miss); the doorkeeper plus counters give the exact
	// count for so few keys.
	p := NewWTinyLFU[int](Capacity{MaxEntries: 10}, func(k int) uint64 { return mix64(uint64(k)) })
	var ev []int
	req := func(k int) {
		if !p.Get(k) {
			for _, e := range p.Add(k, 1, 1) {
				ev = append(ev, e.Key)
			}
		}
	}
	for k := 1; k <= 10; k++ {
		req(k) // window [10], probation [9 .. 1]
	}
	req(1)  // hit: 1 → protected; count(1) = 2
	req(11) // candidate 10 (count 1) vs victim 2 (count 1): not higher → 10 evicted
	req(10) // candidate 11 (1) vs victim 2 (1) → 11 evicted; count(10) = 2
	req(12) // candidate 10 (2) vs victim 2 (1) → 2 evicted, 10 admitted
	if want := []int{10, 11, 2}; !slices.Equal(ev, want) {
		t.Fatalf("evicted %v, want %v", ev, want)
	}
	w, prob, prot := p.Segments()
	if !slices.Equal(w, []int{12}) || !slices.Equal(prob, []int{10, 9, 8, 7, 6, 5, 4, 3}) || !slices.Equal(prot, []int{1}) {
		t.Fatalf("segments window=%v probation=%v protected=%v", w, prob, prot)
	}
}

func TestWTinyLFUAddOnly(t *testing.T) {
	// A caller that never calls Get on a miss (it only Adds) must still get
	// its misses counted. Same capacity as above; every request is one Add.
	p := NewWTinyLFU[int](Capacity{MaxEntries: 10}, func(k int) uint64 { return mix64(uint64(k)) })
	var ev []int
	for _, k := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 10, 12} {
		for _, e := range p.Add(k, 1, 1) {
			ev = append(ev, e.Key)
		}
	}
	// 11: candidate 10 (count 1) vs victim 1 (count 1) → 10 refused.
	// 10 again: count 2; candidate 11 (1) vs 1 (1) → 11 refused.
	// 12: candidate 10 (2) vs 1 (1) → 1 evicted, 10 admitted.
	if want := []int{10, 11, 1}; !slices.Equal(ev, want) {
		t.Fatalf("evicted %v, want %v", ev, want)
	}
}

func TestSketch(t *testing.T) {
	s := newSketch(64)
	h := mix64(42)
	for i := 1; i <= 20; i++ {
		s.increment(h)
		if got, want := s.estimate(h), min(i, 16); got != want {
			t.Fatalf("after %d increments estimate %d, want %d", i, got, want)
		}
	}
	if got := s.estimate(mix64(7)); got != 0 {
		t.Fatalf("unseen key estimate %d, want 0", got)
	}
	s.age() // counter 15 → 7, doorkeeper cleared
	if got := s.estimate(h); got != 7 {
		t.Fatalf("after aging estimate %d, want 7", got)
	}
	// Aging happens by itself after 10×width increments.
	s2 := newSketch(64)
	h2 := mix64(9)
	for range 10 {
		s2.increment(h2) // door + 9
	}
	for i := 0; s2.adds != 0 && i < 10*64; i++ {
		s2.increment(mix64(uint64(1000 + i)))
	}
	if s2.estimate(h2) >= 10 {
		t.Fatalf("no aging after %d increments: estimate %d", 10*64, s2.estimate(h2))
	}
}

func TestByteCapacity(t *testing.T) {
	p := NewLRU[string](Capacity{MaxBytes: 10})
	got := run(t, p, []op{addSC("a", 4, 1), addSC("b", 4, 1), addSC("c", 4, 1)}) // 12 > 10: evict a
	if !slices.Equal(got, []string{"a"}) || p.Bytes() != 8 {
		t.Fatalf("evicted %v bytes %d, want [a] 8", got, p.Bytes())
	}
	// Too large for the cache at all: rejected, reported as its own eviction.
	ev := p.Add("d", 11, 1)
	if len(ev) != 1 || ev[0].Key != "d" || p.Contains("d") || p.Bytes() != 8 {
		t.Fatalf("oversized add: %v contains=%v bytes=%d", ev, p.Contains("d"), p.Bytes())
	}
	// Growing b to 9 bytes moves it to the front and pushes c out.
	ev = p.Add("b", 9, 1)
	if len(ev) != 1 || ev[0].Key != "c" || p.Bytes() != 9 || p.Len() != 1 {
		t.Fatalf("resize: %v bytes=%d len=%d", ev, p.Bytes(), p.Len())
	}
	// A resident key resized beyond MaxBytes leaves.
	ev = p.Add("b", 20, 1)
	if len(ev) != 1 || ev[0].Key != "b" || p.Len() != 0 || p.Bytes() != 0 {
		t.Fatalf("oversized resize: %v len=%d bytes=%d", ev, p.Len(), p.Bytes())
	}
	// Both bounds: the tighter one wins.
	q := NewFIFO[string](Capacity{MaxEntries: 3, MaxBytes: 100})
	got = run(t, q, []op{addSC("a", 60, 1), addSC("b", 30, 1), addSC("c", 20, 1)}) // 110 bytes: evict a
	got = append(got, run(t, q, []op{add("d"), add("e")})...)                      // d: 3 entries, 51 bytes; e: 4 entries → evict b
	if !slices.Equal(got, []string{"a", "b"}) || q.Bytes() != 22 {
		t.Fatalf("both bounds: evicted %v bytes %d", got, q.Bytes())
	}
}

func TestNewAndValidate(t *testing.T) {
	for _, n := range Names() {
		p, err := New[string](n, Capacity{MaxEntries: 2})
		if err != nil {
			t.Fatalf("New(%q): %v", n, err)
		}
		p.Add("a", 1, 1)
		p.Add("b", 1, 1)
		p.Add("c", 1, 1)
		if p.Len() > 2 {
			t.Fatalf("%s: Len %d > 2", n, p.Len())
		}
	}
	if _, err := New[string]("arc", Capacity{}); !errors.Is(err, ErrUnknownPolicy) {
		t.Fatalf("unknown policy: %v", err)
	}
	if _, err := New[string]("lru", Capacity{MaxBytes: -1}); !errors.Is(err, ErrCapacity) {
		t.Fatalf("negative capacity: %v", err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("NewLRU with a negative capacity did not panic")
		}
	}()
	NewLRU[string](Capacity{MaxEntries: -1})
}

func TestUnbounded(t *testing.T) {
	for _, n := range Names() {
		p, _ := New[int](n, Capacity{})
		for i := range 1000 {
			if ev := p.Add(i, int64(i), 1); len(ev) != 0 {
				t.Fatalf("%s: unbounded policy evicted %v", n, ev)
			}
		}
		if p.Len() != 1000 || p.Bytes() != 999*1000/2 {
			t.Fatalf("%s: Len %d Bytes %d", n, p.Len(), p.Bytes())
		}
	}
}

func TestReasonString(t *testing.T) {
	for r, want := range map[Reason]string{ReasonCapacity: "capacity", ReasonTTL: "ttl", ReasonExplicit: "explicit", 9: "reason(9)"} {
		if r.String() != want {
			t.Errorf("%d: %q want %q", r, r.String(), want)
		}
	}
}
