//go:build cuda

package medusa

import (
	"fmt"
	"testing"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/speculative"
)

// TestDeviceHeadsOnlyAskedRows: in a batch where only some requests ask
// for heads (a plain decode token without heads, a greedy tree with heads
// and argmax rows, a decode token with heads), the heads run on the asking
// requests' rows only, and each gets the same candidates (and the tree its
// same argmax rows) as when it is forwarded alone. 7 tokens: the
// batch-invariant GEMV path, so equal means bit-equal inputs.
func TestDeviceHeadsOnlyAskedRows(t *testing.T) {
	target := loadCUDATarget(t)
	p, err := New(target, Spec{Heads: shippedHeads, Tree: "64", VocabLimit: 2048})
	if err != nil {
		t.Fatal(err)
	}
	id := p.DeviceHeads(target.Backend())
	if id == 0 {
		t.Fatalf("heads not on the device: %v", p.DeviceError())
	}
	var seqs []*engine.Sequence
	defer func() {
		for _, s := range seqs {
			s.Free()
		}
	}()
	prompts := speculative.BenchPrompts()[:3]
	newSeq := func(i int) *engine.Sequence {
		s := target.NewSequence()
		seqs = append(seqs, s)
		if _, err := s.Forward(target.Tokenizer.Encode(prompts[i], true), nil, []int32{}); err != nil {
			t.Fatal(err)
		}
		return s
	}
	items := func(s [3]*engine.Sequence) []engine.BatchItem {
		return []engine.BatchItem{
			{Seq: s[0], Tokens: []int32{101}, LogitsRows: []int32{0}},
			{Seq: s[1], Tokens: []int32{102, 103, 104, 105, 106}, Parents: []int32{-1, 0, 0, 1, 3}, ArgmaxOnly: true, Heads: id},
			{Seq: s[2], Tokens: []int32{107}, Heads: id},
		}
	}
	together := items([3]*engine.Sequence{newSeq(0), newSeq(1), newSeq(2)})
	if err := target.ForwardBatch(together); err != nil {
		t.Fatal(err)
	}
	alone := items([3]*engine.Sequence{newSeq(0), newSeq(1), newSeq(2)})
	for i := range alone {
		if err := target.ForwardBatch(alone[i : i+1]); err != nil {
			t.Fatal(err)
		}
	}
	w := target.Backend().(engine.HeadsBackend).HeadsWidth(id)
	for i := 1; i < 3; i++ {
		rows := len(together[i].Tokens)
		if len(together[i].HeadTop) != rows*w {
			t.Fatalf("item %d: %d head candidates for %d rows x %d", i, len(together[i].HeadTop), rows, w)
		}
		if got, want := fmt.Sprint(together[i].HeadTop), fmt.Sprint(alone[i].HeadTop); got != want {
			t.Errorf("item %d: head candidates in the mixed batch differ from alone:\n%s\n%s", i, got, want)
		}
		for _, v := range together[i].HeadTop {
			if v < 0 {
				t.Fatalf("item %d: head candidate %d (heads not run for its rows)", i, v)
			}
		}
	}
	if got, want := fmt.Sprint(together[1].Argmax), fmt.Sprint(alone[1].Argmax); got != want {
		t.Errorf("tree argmax rows in the mixed batch %s, alone %s", got, want)
	}
	if len(together[0].Logits) < target.Config.VocabSize || engine.Argmax(together[0].Logits) != engine.Argmax(alone[0].Logits) {
		t.Errorf("the plain row's logits differ between the mixed batch and alone")
	}
}
