package policy

import (
	"container/heap"
	"slices"
	"time"
)

// TTL wraps a policy with time-based expiry. An entry added at time t with
// lifetime d is live during the half-open interval [t, t+d); from t+d on it is
// expired: Get and Contains report it absent, and it leaves the inner policy
// with ReasonTTL at the first of Get (for that key), Add or Sweep.
//
// Expired keys found by Get are queued and returned by the next Add or
// Sweep, so every eviction is reported exactly once. Until then Len and
// Bytes of a TTL count expired keys that Get has not seen; call Sweep to
// drop them. Add refreshes the deadline of a resident key.
//
// The clock is read once per call. Deadlines are kept in a min-heap, so each
// operation costs O(log n) on top of the inner policy. Not safe for
// concurrent use (see Synchronized).
type TTL[K comparable] struct {
	p       Policy[K]
	ttl     time.Duration
	now     func() time.Time
	byKey   map[K]*deadline[K]
	h       deadlineHeap[K]
	pending []Eviction[K]
}

type deadline[K comparable] struct {
	key   K
	at    time.Time
	index int
}

// WithTTL wraps p (which the TTL then owns: use p only through it) so that
// entries expire ttl after their last Add. ttl <= 0 means that Add sets no
// deadline (AddTTL can still set one). now is the clock; nil means
// time.Now. Tests pass a fake clock.
func WithTTL[K comparable](p Policy[K], ttl time.Duration, now func() time.Time) *TTL[K] {
	if now == nil {
		now = time.Now
	}
	return &TTL[K]{p: p, ttl: ttl, now: now, byKey: make(map[K]*deadline[K])}
}

type deadlineHeap[K comparable] []*deadline[K]

func (h deadlineHeap[K]) Len() int           { return len(h) }
func (h deadlineHeap[K]) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h deadlineHeap[K]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *deadlineHeap[K]) Push(x any) {
	d := x.(*deadline[K])
	d.index = len(*h)
	*h = append(*h, d)
}
func (h *deadlineHeap[K]) Pop() any {
	old := *h
	d := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return d
}

func (t *TTL[K]) forget(k K) {
	if d, ok := t.byKey[k]; ok {
		heap.Remove(&t.h, d.index)
		delete(t.byKey, k)
	}
}

func (t *TTL[K]) set(k K, at time.Time) {
	if d, ok := t.byKey[k]; ok {
		d.at = at
		heap.Fix(&t.h, d.index)
		return
	}
	d := &deadline[K]{key: k, at: at}
	t.byKey[k] = d
	heap.Push(&t.h, d)
}

func (t *TTL[K]) expired(k K, now time.Time) bool {
	d, ok := t.byKey[k]
	return ok && !now.Before(d.at)
}

func (t *TTL[K]) sweep(now time.Time) []Eviction[K] {
	ev := t.pending
	t.pending = nil
	for len(t.h) > 0 && !now.Before(t.h[0].at) {
		d := heap.Pop(&t.h).(*deadline[K])
		delete(t.byKey, d.key)
		t.p.Remove(d.key)
		ev = append(ev, Eviction[K]{d.key, ReasonTTL})
	}
	return ev
}

// Sweep removes every expired entry and returns them, with the ones Get found
// since the last Add or Sweep, all with ReasonTTL.
func (t *TTL[K]) Sweep() []Eviction[K] { return t.sweep(t.now()) }

// Add is AddTTL with the wrapper's default lifetime.
func (t *TTL[K]) Add(k K, size int64, cost float64) []Eviction[K] {
	return t.AddTTL(k, size, cost, t.ttl)
}

// AddTTL sweeps expired entries, adds k to the inner policy, and gives k the
// lifetime ttl from now (ttl <= 0: k never expires). It returns the expired
// entries (ReasonTTL) followed by the inner policy's evictions. Like every
// Add, it never reports a key that is resident when it returns: re-adding an
// expired k replaces it silently.
func (t *TTL[K]) AddTTL(k K, size int64, cost float64, ttl time.Duration) []Eviction[K] {
	now := t.now()
	ev := t.sweep(now)
	inner := t.p.Add(k, size, cost)
	for _, e := range inner {
		t.forget(e.Key)
	}
	resident := t.p.Contains(k)
	if ttl > 0 && resident {
		t.set(k, now.Add(ttl))
	} else {
		t.forget(k)
	}
	if resident {
		// k expired and is being re-added: the caller must not delete the
		// new entry, so the old one's expiry is not reported.
		ev = slices.DeleteFunc(ev, func(e Eviction[K]) bool { return e.Key == k })
	}
	return append(ev, inner...)
}

// Get reports whether k is resident and live, recording the access in the
// inner policy. An expired k is removed and queued for the next Add or Sweep.
func (t *TTL[K]) Get(k K) bool {
	if t.expired(k, t.now()) {
		t.forget(k)
		t.p.Remove(k)
		t.pending = append(t.pending, Eviction[K]{k, ReasonTTL})
		return false
	}
	return t.p.Get(k)
}

// Contains reports whether k is resident and live; it changes nothing.
func (t *TTL[K]) Contains(k K) bool {
	return !t.expired(k, t.now()) && t.p.Contains(k)
}

// Remove drops k, live or expired.
func (t *TTL[K]) Remove(k K) bool {
	t.forget(k)
	return t.p.Remove(k)
}

// Len is the inner policy's Len (expired keys not yet swept included).
func (t *TTL[K]) Len() int { return t.p.Len() }

// Bytes is the inner policy's Bytes (expired keys not yet swept included).
func (t *TTL[K]) Bytes() int64 { return t.p.Bytes() }

// Deadline returns when k expires; ok is false when k has no deadline.
func (t *TTL[K]) Deadline(k K) (at time.Time, ok bool) {
	d, ok := t.byKey[k]
	if !ok {
		return time.Time{}, false
	}
	return d.at, true
}

var (
	_ Policy[string]  = (*TTL[string])(nil)
	_ Sweeper[string] = (*TTL[string])(nil)
)
