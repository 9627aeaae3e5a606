package engine

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// TestHiddenOnly: a hidden-only item gets the same final hidden rows as a
// forward that computes logits too (bitwise), leaves its Logits alone, and
// does not change the logits of the items batched with it; a tree item
// appended to a pending tree (several backend requests) works the same;
// a backend that is no HiddenOnlyForwarder refuses the item.
func TestHiddenOnly(t *testing.T) {
	cfg := testConfigs()["gqa"]
	m := NewRandomModel(cfg, 11, LoadOptions{KVTokens: 1024, BlockSize: 4, Threads: 2})
	if !m.SupportsHiddenOnly() {
		t.Fatal("CPU backend: SupportsHiddenOnly false")
	}
	V, H := cfg.VocabSize, cfg.HiddenSize
	r := rand.New(rand.NewPCG(7, 8))
	p1, p2 := randTokens(r, 9, V), randTokens(r, 12, V)
	mk := func() (*Sequence, *Sequence) {
		a, b := m.NewSequence(), m.NewSequence()
		if _, err := b.Forward(p2[:11], nil, []int32{}); err != nil {
			t.Fatal(err)
		}
		return a, b
	}
	equal := func(name string, got, want []float32) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: len %d want %d", name, len(got), len(want))
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%s[%d]: %g vs %g", name, i, got[i], want[i])
			}
		}
	}
	// reference: both items with logits and hidden rows
	a, b := mk()
	ref := []BatchItem{{Seq: a, Tokens: p1, LogitsRows: []int32{8, 3}, WantHidden: true}, {Seq: b, Tokens: p2[11:], WantHidden: true}}
	if err := m.ForwardBatch(ref); err != nil {
		t.Fatal(err)
	}
	a, b = mk()
	got := []BatchItem{{Seq: a, Tokens: p1, LogitsRows: []int32{8, 3}, HiddenOnly: true}, {Seq: b, Tokens: p2[11:]}}
	if err := m.ForwardBatch(got); err != nil {
		t.Fatal(err)
	}
	if got[0].Logits != nil {
		t.Fatalf("hidden-only item got %d logits", len(got[0].Logits))
	}
	equal("hidden-only rows", got[0].Hidden, ref[0].Hidden)
	if len(got[0].Hidden) != 2*H {
		t.Fatalf("hidden rows: %d values, want %d", len(got[0].Hidden), 2*H)
	}
	equal("logits of the item beside it", got[1].Logits, ref[1].Logits)
	if a.Len() != len(p1) {
		t.Fatalf("hidden-only chain not committed: len %d", a.Len())
	}

	// a tree grown level by level: the second level is split into one
	// backend request per attachment point
	grow := func(hiddenOnly bool) []float32 {
		s := m.NewSequence()
		defer s.Free()
		if _, err := s.Forward(p1, nil, []int32{}); err != nil {
			t.Fatal(err)
		}
		if err := m.ForwardBatch([]BatchItem{{Seq: s, Tokens: []int32{3, 4}, Parents: []int32{-1, -1}, WantHidden: true}}); err != nil {
			t.Fatal(err)
		}
		it := []BatchItem{{Seq: s, Tokens: []int32{5, 6, 7}, Parents: []int32{0, 1, 2}, WantHidden: !hiddenOnly, HiddenOnly: hiddenOnly}}
		if err := m.ForwardBatch(it); err != nil {
			t.Fatal(err)
		}
		return it[0].Hidden
	}
	equal("tree level", grow(true), grow(false))

	// a backend without hidden-only forwards refuses it
	w := NewModelWithBackend(t, cfg)
	s := w.NewSequence()
	err := w.ForwardBatch([]BatchItem{{Seq: s, Tokens: p1, HiddenOnly: true}})
	if err == nil || !strings.Contains(err.Error(), "hidden-only") {
		t.Fatalf("backend without hidden-only forwards: err %v", err)
	}
	if s.Len() != 0 {
		t.Fatalf("refused forward changed the sequence: len %d", s.Len())
	}
}

// plainBackend hides every optional interface of the CPU backend.
type plainBackend struct{ Backend }

// NewModelWithBackend is a random model of cfg whose backend is the CPU
// backend behind plainBackend.
func NewModelWithBackend(t *testing.T, cfg Config) *Model {
	t.Helper()
	m, err := NewModel(cfg, RandomWeights(cfg, 11), LoadOptions{KVTokens: 256, BlockSize: 4, Threads: 1,
		NewBackend: func(cfg Config, w *Weights, numSlots int) (Backend, error) {
			b, err := NewCPUBackend(cfg, w, numSlots, 1)
			return plainBackend{b}, err
		}})
	if err != nil {
		t.Fatal(err)
	}
	return m
}
