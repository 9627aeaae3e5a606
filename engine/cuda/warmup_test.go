package cuda

import (
	"fmt"
	"testing"

	"github.com/specgate/specgate/engine"
)

// TestWarmupRequestsValid (no GPU): every step the warm-up runs is a valid
// batch (flatten accepts it, no written slot is a cached one) that writes
// only slots below the reserve, reads its prefix from slots at and above
// it, has no attn_tile prefill tiles (they would make it ungraphable),
// reaches the longest key count its split count was chosen for, and has the
// logits rows, mask and head rows of the step it stands for.
func TestWarmupRequestsValid(t *testing.T) {
	b := &Backend{cfg: engine.Config{VocabSize: 8192}, opt: Options{NumSlots: 4096}, tileTokens: 16}
	const reserve = 64
	for _, ctx := range []int{1, 100, 257, 513, 1024} {
		for _, sh := range []warmShape{{n: 1}, {n: 8}, {n: 32}, {n: 64}, {n: 2, tree: true, argmax: true}, {n: 9, tree: true},
			{n: 17, tree: true, argmax: true}, {n: 64, tree: true}, {n: 1, tree: true, heads: 1}, {n: 64, tree: true, argmax: true, heads: 2},
			{n: 2, prefill: true}, {n: 15, prefill: true}} {
			sh.ctx = ctx
			name := fmt.Sprintf("%+v", sh)
			reqs := b.warmRequests(sh, reserve)
			fb, err := b.flatten(reqs)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if err := checkSlotsDisjoint(reqs); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			nTok, rows := sh.n, sh.n
			if !sh.tree && !sh.prefill {
				nTok = 1
			}
			if sh.prefill {
				rows = 1 // the last token's
				if r := reqs[0]; len(reqs) != 1 || r.Parents != nil || len(r.LogitsRows) != 1 || int(r.LogitsRows[0]) != sh.n-1 {
					t.Fatalf("%s: %d requests, parents %v, logits rows %v: want one chain request with its last row", name, len(reqs), r.Parents, r.LogitsRows)
				}
			}
			for _, r := range reqs {
				for _, s := range r.Slots {
					if s < 0 || s >= reserve {
						t.Fatalf("%s: writes slot %d, outside [0, %d)", name, s, reserve)
					}
				}
				for _, s := range r.CachedSlots {
					if s < reserve || int(s) >= b.opt.NumSlots {
						t.Fatalf("%s: reads slot %d, outside [%d, %d)", name, s, reserve, b.opt.NumSlots)
					}
				}
				if (r.Argmax != nil) != sh.argmax || (sh.argmax && len(r.Argmax) != len(r.Tokens)) {
					t.Fatalf("%s: Argmax %v", name, r.Argmax)
				}
			}
			longest := 0
			for _, n := range fb.kvlen {
				longest = max(longest, int(n))
			}
			if want := max(ctx, nTok); longest != want {
				t.Fatalf("%s: longest key count %d, want %d", name, longest, want)
			}
			if len(fb.tiles) != 0 || fb.T != sh.n || fb.R != rows {
				t.Fatalf("%s: T %d R %d tiles %v, want T %d R %d no tiles", name, fb.T, fb.R, fb.tiles, sh.n, rows)
			}
			if sh.tree != (fb.W > 0) {
				t.Fatalf("%s: %d mask words (a tree step has an ancestor mask: exact.go keys on it)", name, fb.W)
			}
			wantH := 0
			if sh.heads > 0 {
				wantH = sh.n
			}
			if len(fb.hrows) != wantH {
				t.Fatalf("%s: %d head rows, want %d", name, len(fb.hrows), wantH)
			}
		}
	}
}
