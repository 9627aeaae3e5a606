package cuda

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/specgate/specgate/engine"
)

// flatten needs no GPU: check the per-token attention metadata it builds.
func TestFlattenChainAndTree(t *testing.T) {
	b := &Backend{cfg: engine.Config{VocabSize: 50}, opt: Options{NumSlots: 100}}
	chain := &engine.ForwardRequest{CachedSlots: []int32{7, 8}, Tokens: []int32{1, 2, 3}, Positions: []int32{2, 3, 4},
		Slots: []int32{9, 10, 11}, LogitsRows: []int32{2}}
	tree := &engine.ForwardRequest{CachedSlots: []int32{20}, Tokens: []int32{4, 5, 6, 7}, Positions: []int32{1, 2, 2, 3},
		Slots: []int32{30, 31, 32, 33}, Parents: []int32{-1, 0, 0, 2}}
	fb, err := b.flatten([]*engine.ForwardRequest{chain, tree})
	if err != nil {
		t.Fatal(err)
	}
	if fb.T != 7 || fb.R != 5 || fb.S != 2+3+1+4 {
		t.Fatalf("T %d R %d S %d", fb.T, fb.R, fb.S)
	}
	if want := []int32{7, 8, 9, 10, 11, 20, 30, 31, 32, 33}; !slices.Equal(fb.slotList, want) {
		t.Fatalf("slot list %v, want %v", fb.slotList, want)
	}
	if want := []int32{0, 0, 0, 5, 5, 5, 5}; !slices.Equal(fb.kvoff, want) {
		t.Fatalf("kvoff %v", fb.kvoff)
	}
	if want := []int32{3, 4, 5, 2, 3, 4, 5}; !slices.Equal(fb.kvlen, want) {
		t.Fatalf("kvlen %v (cached + i + 1)", fb.kvlen)
	}
	// Chain: only its last token (global 2); tree: all four (globals 3..6).
	if want := []int32{2, 3, 4, 5, 6}; !slices.Equal(fb.rows, want) {
		t.Fatalf("rows %v, want %v", fb.rows, want)
	}
	if !slices.Equal(fb.maskof[:3], []int32{-1, -1, -1}) {
		t.Fatalf("chain tokens must have no mask: %v", fb.maskof)
	}
	// Tree masks: node 0 {0}, node 1 {0,1}, node 2 {0,2}, node 3 {0,2,3}.
	want := []uint32{0b0001, 0b0011, 0b0101, 0b1101}
	for i, w := range want {
		got := uint32(fb.mask[fb.maskof[3+i]])
		if got != w {
			t.Errorf("tree node %d mask %04b, want %04b", i, got, w)
		}
	}
	if !slices.Equal(fb.reqRows, []int{0, 1}) {
		t.Fatalf("reqRows %v", fb.reqRows)
	}
}

func TestFlattenRejects(t *testing.T) {
	b := &Backend{cfg: engine.Config{VocabSize: 50}, opt: Options{NumSlots: 100}}
	for name, c := range map[string]struct {
		r    engine.ForwardRequest
		want error
	}{
		"no tokens":     {engine.ForwardRequest{}, ErrRequest},
		"slot range":    {engine.ForwardRequest{Tokens: []int32{1}, Positions: []int32{0}, Slots: []int32{100}}, ErrSlot},
		"cached range":  {engine.ForwardRequest{CachedSlots: []int32{-1}, Tokens: []int32{1}, Positions: []int32{1}, Slots: []int32{3}}, ErrSlot},
		"token range":   {engine.ForwardRequest{Tokens: []int32{50}, Positions: []int32{0}, Slots: []int32{0}}, ErrRequest},
		"parent order":  {engine.ForwardRequest{Tokens: []int32{1, 2}, Positions: []int32{0, 1}, Slots: []int32{0, 1}, Parents: []int32{1, -1}}, ErrRequest},
		"parents len":   {engine.ForwardRequest{Tokens: []int32{1, 2}, Positions: []int32{0, 1}, Slots: []int32{0, 1}, Parents: []int32{-1}}, ErrRequest},
		"logits row":    {engine.ForwardRequest{Tokens: []int32{1}, Positions: []int32{0}, Slots: []int32{0}, LogitsRows: []int32{-1}}, ErrRequest},
		"negative pos":  {engine.ForwardRequest{Tokens: []int32{1}, Positions: []int32{-3}, Slots: []int32{0}}, ErrRequest},
		"positions len": {engine.ForwardRequest{Tokens: []int32{1, 2}, Positions: []int32{0}, Slots: []int32{0, 1}}, ErrRequest},
	} {
		r := c.r
		if _, err := b.flatten([]*engine.ForwardRequest{&r}); !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", name, err, c.want)
		}
	}
}

func TestCheckSlotsDisjoint(t *testing.T) {
	ok := []*engine.ForwardRequest{{CachedSlots: []int32{0, 1, 2}, Slots: []int32{3}}, {CachedSlots: []int32{0, 1}, Slots: []int32{4}}}
	if err := checkSlotsDisjoint(ok); err != nil {
		t.Fatalf("shared cached prefix, distinct new slots: %v", err)
	}
	bad := []*engine.ForwardRequest{{CachedSlots: []int32{0, 1, 2}, Slots: []int32{3}}, {CachedSlots: []int32{5}, Slots: []int32{2}}}
	if err := checkSlotsDisjoint(bad); !errors.Is(err, ErrSlot) || !strings.Contains(err.Error(), "slot 2") {
		t.Fatalf("new slot cached by another request: %v, want ErrSlot naming slot 2", err)
	}
}
