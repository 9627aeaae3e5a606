// Package policy holds cache eviction policies behind one small generic
// interface, a TTL wrapper that composes with any of them, a mutex wrapper,
// and a trace-driven simulator with Belady's offline-optimal reference.
//
// A Policy only does bookkeeping: it tracks which keys are resident, their
// accounting size in bytes and their cost to regenerate, and decides which
// keys leave when a capacity is exceeded. It never holds the cached values;
// the caller stores values elsewhere and deletes the keys a Policy reports as
// evicted.
//
// Policies are not safe for concurrent use; wrap one in Synchronized to share
// it between goroutines.
//
// The package imports nothing else of specgate.
package policy

import (
	"errors"
	"fmt"
	"sort"
)

// Sentinel errors.
var (
	// ErrUnknownPolicy is returned by New for a name it does not know.
	ErrUnknownPolicy = errors.New("policy: unknown policy")
	// ErrCapacity is returned for a negative capacity.
	ErrCapacity = errors.New("policy: invalid capacity")
)

// Reason says why a key left a policy.
type Reason uint8

const (
	// ReasonCapacity: evicted to respect MaxEntries or MaxBytes, or not
	// admitted at all (the key of Add itself may be reported with it).
	ReasonCapacity Reason = iota + 1
	// ReasonTTL: expired (only reported by the TTL wrapper).
	ReasonTTL
	// ReasonExplicit: removed on request. Policies never report it (Remove is
	// the caller's own act); it exists so that callers can label all removals
	// with one type, e.g. in an evictions-by-reason metric.
	ReasonExplicit
)

// String returns "capacity", "ttl" or "explicit" (metric label values).
func (r Reason) String() string {
	switch r {
	case ReasonCapacity:
		return "capacity"
	case ReasonTTL:
		return "ttl"
	case ReasonExplicit:
		return "explicit"
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// Eviction is one key that left a policy, and why.
type Eviction[K comparable] struct {
	Key    K
	Reason Reason
}

// Policy decides which keys to keep. Implementations in this package: LRU,
// LFU, FIFO, S3FIFO, WTinyLFU, GDSF, and the TTL and Sync wrappers.
//
// Sizes are accounting bytes (negative sizes count as 0); cost is the price of
// regenerating the entry (only the cost-aware GDSF uses it; non-positive costs
// count as 1 there).
type Policy[K comparable] interface {
	// Add inserts k, or updates the size and cost of a resident k and counts
	// it as an access. It returns the keys that left, oldest decision first.
	// The slice may contain k itself when k was not admitted (too large for
	// MaxBytes, or refused by an admission filter); no key in it is resident
	// when Add returns, so the caller can delete them all. The caller owns
	// the returned slice.
	Add(k K, size int64, cost float64) (evicted []Eviction[K])
	// Get reports whether k is resident and records the access.
	Get(k K) bool
	// Contains reports whether k is resident without recording an access.
	Contains(k K) bool
	// Remove drops k; it reports whether k was resident.
	Remove(k K) bool
	// Len is the number of resident keys.
	Len() int
	// Bytes is the sum of the sizes of the resident keys.
	Bytes() int64
}

// Sweeper is implemented by policies that can expire entries on their own
// (the TTL wrapper). Sweep removes every expired entry and returns them with
// ReasonTTL.
type Sweeper[K comparable] interface {
	Sweep() []Eviction[K]
}

// Capacity bounds a policy. A zero field means no bound in that dimension;
// both zero means unbounded. When both are set, both are enforced.
type Capacity struct {
	MaxEntries int   // at most this many resident keys
	MaxBytes   int64 // at most this many bytes (sum of sizes)
}

// Validate returns ErrCapacity for a negative field.
func (c Capacity) Validate() error {
	if c.MaxEntries < 0 {
		return fmt.Errorf("%w: MaxEntries %d < 0", ErrCapacity, c.MaxEntries)
	}
	if c.MaxBytes < 0 {
		return fmt.Errorf("%w: MaxBytes %d < 0", ErrCapacity, c.MaxBytes)
	}
	return nil
}

func (c Capacity) mustValid() {
	if err := c.Validate(); err != nil {
		panic(err)
	}
}

// over reports whether n keys of b bytes exceed c.
func (c Capacity) over(n int, b int64) bool {
	return (c.MaxEntries > 0 && n > c.MaxEntries) || (c.MaxBytes > 0 && b > c.MaxBytes)
}

// tooBig reports whether one entry of size bytes can never fit.
func (c Capacity) tooBig(size int64) bool {
	return c.MaxBytes > 0 && size > c.MaxBytes
}

func clampSize(size int64) int64 { return max(size, 0) }

// Names lists the policy names New accepts, sorted.
func Names() []string {
	n := make([]string, 0, len(constructors))
	for k := range constructors {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

var constructors = map[string]bool{
	"lru": true, "lfu": true, "fifo": true, "s3fifo": true, "wtinylfu": true, "gdsf": true,
}

// New returns the policy called name ("lru", "lfu", "fifo", "s3fifo",
// "wtinylfu", "gdsf") bounded by c. It is the entry point for code that
// picks a policy from configuration. W-TinyLFU gets the default (randomly
// seeded) hash.
func New[K comparable](name string, c Capacity) (Policy[K], error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	switch name {
	case "lru":
		return NewLRU[K](c), nil
	case "lfu":
		return NewLFU[K](c), nil
	case "fifo":
		return NewFIFO[K](c), nil
	case "s3fifo":
		return NewS3FIFO[K](c), nil
	case "wtinylfu":
		return NewWTinyLFU[K](c, nil), nil
	case "gdsf":
		return NewGDSF[K](c), nil
	}
	return nil, fmt.Errorf("%w: %q (known: %v)", ErrUnknownPolicy, name, Names())
}
