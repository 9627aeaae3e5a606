//go:build cuda

package cuda

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"testing"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/medusa"
)

// loadWarmTarget loads the shipped target on a CUDA backend of its own with
// the shipped Medusa heads on the device; it returns the backend and the
// heads' id.
func loadWarmTarget(t *testing.T) (*Backend, int) {
	t.Helper()
	m, err := engine.Load("../../models/specgate-target", engine.LoadOptions{KVTokens: 4096, DisablePrefixCache: true,
		NewBackend: Factory(Options{})})
	if err != nil {
		if os.Getenv("SPECGATE_EXPECT_GPU") == "" {
			t.Skipf("no GPU: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	b, ok := m.Backend().(*Backend)
	if !ok {
		t.Fatalf("backend %T, want *cuda.Backend", m.Backend())
	}
	p, err := medusa.New(m, medusa.Spec{Heads: "../../models/specgate-target-medusa"})
	if err != nil {
		t.Fatal(err)
	}
	id := p.DeviceHeads(b)
	if id == 0 {
		t.Fatalf("Medusa heads not on the device: %v", p.DeviceError())
	}
	return b, id
}

// TestWarmupCapturesOnGPU: after Warmup, tree steps of every size 2..64
// (device argmax and logits, with and without the Medusa heads) and plain
// decode batches of 1..8 requests at a 100-token context replay graphs the
// warm-up captured: no capture while they run, one replay per step
// (Backend.Stats). Their outputs (argmax rows, logits bits, heads'
// candidates) equal those of a second backend without warm-up on which the
// same steps run cold (eagerly at first sighting); the prompt's KV, in
// slots the warm-up wrote to (it writes slots from 0 and puts them back),
// is the same on both, and so is a greedy continuation after.
func TestWarmupCapturesOnGPU(t *testing.T) {
	warm, wid := loadWarmTarget(t)
	cold, cid := loadWarmTarget(t)
	V := warm.cfg.VocabSize
	prompt := make([]int32, 100)
	for i := range prompt {
		prompt[i] = int32(5 + 7*i%8000)
	}
	seqn := func(a, n int) []int32 {
		s := make([]int32, n)
		for i := range s {
			s[i] = int32(a + i)
		}
		return s
	}
	for _, b := range []*Backend{warm, cold} {
		if err := b.Forward([]*engine.ForwardRequest{{Tokens: prompt, Positions: seqn(0, 100), Slots: seqn(0, 100),
			LogitsRows: []int32{}}}); err != nil {
			t.Fatal(err)
		}
	}
	st, err := warm.Warmup(context.Background(), WarmupPlan{MaxBatch: 8, MaxContext: 1024,
		Log: func(msg string, args ...any) { t.Log(msg, fmt.Sprint(args...)) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("warm-up: %+v", st)
	if st.Captured == 0 || st.Left != 0 || st.Shapes == 0 {
		t.Fatalf("warm-up captured %d of %d shapes, %d left", st.Captured, st.Shapes, st.Left)
	}
	g0, h0 := warm.Stats()
	width := warm.hd.sets[wid-1].width
	r := rand.New(rand.NewPCG(3, 4))
	steps := 0
	// run the same step on both backends; compare everything it returns
	run := func(name string, mk func(heads int) []*engine.ForwardRequest) {
		t.Helper()
		rw, rc := mk(wid), mk(cid)
		if err := warm.Forward(rw); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := cold.Forward(rc); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		steps++
		for i := range rw {
			a, c := rw[i], rc[i]
			if !slices.Equal(a.Argmax, c.Argmax) || !slices.Equal(a.HeadTop, c.HeadTop) {
				t.Fatalf("%s: request %d: argmax %v / heads %v after warm-up, %v / %v cold", name, i, a.Argmax, a.HeadTop, c.Argmax, c.HeadTop)
			}
			if len(a.Logits) != len(c.Logits) {
				t.Fatalf("%s: %d / %d logits", name, len(a.Logits), len(c.Logits))
			}
			for v := range a.Logits {
				if math.Float32bits(a.Logits[v]) != math.Float32bits(c.Logits[v]) {
					t.Fatalf("%s: request %d: logit %d (row %d) %v after warm-up, %v cold", name, i, v, v/V, a.Logits[v], c.Logits[v])
				}
			}
		}
	}
	for T := 2; T <= MaxGraphTokens; T++ {
		toks, par := make([]int32, T), make([]int32, T)
		for i := range toks {
			toks[i] = int32(10 + r.IntN(V-10))
			par[i] = int32(r.IntN(i+1)) - 1
		}
		tree := func(argmax bool, heads int) []*engine.ForwardRequest {
			q := &engine.ForwardRequest{Tokens: toks, Positions: seqn(100, T), Slots: seqn(100, T), Parents: par,
				CachedSlots: seqn(0, 100), Heads: heads}
			if argmax {
				q.Argmax = make([]int32, T)
			}
			if heads > 0 {
				q.HeadTop = make([]int32, T*width)
			}
			return []*engine.ForwardRequest{q}
		}
		for _, argmax := range []bool{true, false} {
			run(fmt.Sprintf("tree T=%d argmax=%v", T, argmax), func(int) []*engine.ForwardRequest { return tree(argmax, 0) })
			run(fmt.Sprintf("tree T=%d argmax=%v heads", T, argmax), func(h int) []*engine.ForwardRequest { return tree(argmax, h) })
		}
	}
	for n := 1; n <= 8; n++ {
		run(fmt.Sprintf("decode batch %d", n), func(int) []*engine.ForwardRequest {
			reqs := make([]*engine.ForwardRequest, n)
			for j := range reqs {
				reqs[j] = &engine.ForwardRequest{Tokens: []int32{int32(20 + j)}, Positions: []int32{100}, Slots: []int32{int32(200 + j)},
					CachedSlots: seqn(0, 100)}
			}
			return reqs
		})
	}
	g1, h1 := warm.Stats()
	if g1 != g0 || h1-h0 != steps {
		t.Fatalf("after warm-up, %d steps captured %d graphs and replayed %d (want 0 captures, %d replays)", steps, g1-g0, h1-h0, steps)
	}
	// greedy continuation of the prompt: the same tokens on both
	next := func(b *Backend, tok int32, pos int) int32 {
		out := make([]int32, 1)
		if err := b.ForwardArgmax([]*engine.ForwardRequest{{Tokens: []int32{tok}, Positions: []int32{int32(pos)},
			Slots: []int32{int32(pos)}, CachedSlots: seqn(0, pos)}}, out); err != nil {
			t.Fatal(err)
		}
		return out[0]
	}
	tw, tc := prompt[99], prompt[99]
	var gw, gc []int32
	for pos := 100; pos < 124; pos++ {
		tw, tc = next(warm, tw, pos), next(cold, tc, pos)
		gw, gc = append(gw, tw), append(gc, tc)
	}
	if !slices.Equal(gw, gc) {
		t.Fatalf("greedy continuation after warm-up %v, cold %v", gw, gc)
	}
}
