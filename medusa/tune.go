package medusa

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/specgate/specgate/engine"
)

// Stats are the heads' ranks of the target's own greedy continuation at
// every decoding position of some prompts: Ranks[i][k] is the rank (0 =
// the head's top token) of the token head k should predict at position i
// among head k's candidates, or NoRank when that token is not within
// MaxRank, outside the heads' vocabulary, or past the end of the
// continuation.
type Stats struct {
	Heads, MaxRank int
	Ranks          [][]uint8
}

// NoRank marks a position where head k's label is not among its top
// MaxRank candidates (or outside its vocabulary); NoLabel one where the
// continuation ended before head k's label.
const (
	NoRank  = 255
	NoLabel = 254
)

// Collect decodes every prompt greedily with target (plain decoding, up to
// maxNew tokens or EOS) and ranks the continuation under the heads: the
// hidden row that predicted generated token j is what the proposer sees
// when token j is pending; head k's label is generated token j+k+1. Hydra
// heads also read the path: head k at position j is given the true tokens
// j..j+k (teacher-forced ranks: a tree path is accepted exactly when every
// head on it ranked its label as the path says, given the earlier labels).
func Collect(ctx context.Context, target *engine.Model, h *Heads, prompts [][]int32, maxNew, maxRank int) (*Stats, error) {
	if maxRank < 1 || maxRank >= NoLabel {
		return nil, fmt.Errorf("medusa: maxRank %d: want 1..%d", maxRank, NoLabel-1)
	}
	H, V, K := target.Config.HiddenSize, target.Config.VocabSize, h.NumHeads
	st := &Stats{Heads: K, MaxRank: maxRank}
	rowOf := make([]int32, V) // token -> projection row, -1 outside
	for i := range rowOf {
		rowOf[i] = -1
	}
	for r := range h.Rows() {
		rowOf[h.TokenOf(r)] = int32(r)
	}
	R := h.Rows()
	var buf []float32
	var hbuf [][]float32 // Hydra: per head
	for _, prompt := range prompts {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if len(prompt) == 0 || len(prompt)+maxNew > target.Config.MaxPositions {
			continue
		}
		seq := target.NewSequence()
		var hidden []float32 // [n][H]: row j predicted gen[j]
		var gen []int32
		items := []engine.BatchItem{{Seq: seq, Tokens: prompt, LogitsRows: []int32{int32(len(prompt) - 1)}, WantHidden: true}}
		for len(gen) < maxNew {
			if err := target.ForwardBatch(items); err != nil {
				seq.Free()
				return nil, err
			}
			hidden = append(hidden, items[0].Hidden[:H]...)
			tok := engine.Argmax(items[0].Logits[:V])
			gen = append(gen, tok)
			if slices.Contains(target.Config.EOS, tok) {
				break
			}
			items = []engine.BatchItem{{Seq: seq, Tokens: []int32{tok}, WantHidden: true, Logits: items[0].Logits, Hidden: items[0].Hidden}}
		}
		seq.Free()
		// position j: gen[j] is pending and the proposer reads hidden[j], the
		// row that predicted it; head k's label is gen[j+k+1].
		n := len(gen)
		rows := n
		var logitsOf func(k, j int) []float32
		if h.IsHydra() {
			// Hydra head k at position j reads hidden[j] and the true path
			// gen[j..j+k] (teacher forcing: the tokens the tree would hold
			// if every earlier head were right)
			for len(hbuf) < K {
				hbuf = append(hbuf, nil)
			}
			for k := range K {
				var rowIdx, toks []int32
				for j := 0; j+k+1 < n; j++ {
					rowIdx = append(rowIdx, int32(j))
					toks = append(toks, gen[j:j+k+1]...)
				}
				hbuf[k] = h.HydraLogits(k, hidden[:n*H], n, rowIdx, toks, hbuf[k])
			}
			logitsOf = func(k, j int) []float32 { return hbuf[k][j*R : (j+1)*R] }
		} else {
			buf = h.Logits(hidden[:n*H], rows, K, buf)
			logitsOf = func(k, j int) []float32 { return buf[(k*rows+j)*R : (k*rows+j+1)*R] }
		}
		for j := range n {
			rk := make([]uint8, K)
			for k := range K {
				rk[k] = NoRank
				if j+k+1 >= n {
					rk[k] = NoLabel
					continue
				}
				row := rowOf[gen[j+k+1]]
				if row < 0 {
					continue
				}
				l := logitsOf(k, j)
				v := l[row]
				rank := 0
				for i, x := range l {
					if x > v || (x == v && int32(i) < row) {
						rank++
						if rank >= maxRank {
							break
						}
					}
				}
				if rank < maxRank {
					rk[k] = uint8(rank)
				}
			}
			st.Ranks = append(st.Ranks, rk)
		}
	}
	return st, nil
}

// Accuracy returns, per head, the fraction of positions with a label whose
// rank is below top (accuracy@top), and the number of such positions.
func (s *Stats) Accuracy(top int) ([]float64, []int) {
	acc := make([]float64, s.Heads)
	n := make([]int, s.Heads)
	for _, rk := range s.Ranks {
		for k, r := range rk {
			if r == NoLabel {
				continue
			}
			n[k]++
			if int(r) < top {
				acc[k]++
			}
		}
	}
	for k := range acc {
		acc[k] /= float64(max(n[k], 1))
	}
	return acc, n
}

// TreeNode is one path of a tuned tree with its empirical acceptance
// probability: the fraction of positions at which every head on the path
// ranked the target's continuation exactly as the path says (then the node
// is on the accepted path; E[accepted tokens per step] = sum of Value).
type TreeNode struct {
	Path  []int
	Value float64
}

// GreedyTree builds the best tree of up to nodes paths (depth <= maxDepth)
// for the statistics: repeatedly the candidate (a child of the root or of
// a chosen path, rank < MaxRank) of the largest empirical acceptance
// probability joins. Values never grow along a path, so the greedy order
// is a valid priority order (parents first) and every prefix of it is the
// best tree of its size for these statistics (the Medusa authors' method,
// with joint frequencies instead of a product of per-head accuracies).
func (s *Stats) GreedyTree(nodes, maxDepth int) []TreeNode {
	maxDepth = min(maxDepth, s.Heads)
	count := s.PathValue
	type cand struct {
		path []int
		v    float64
	}
	var cands []cand
	addChildren := func(parent []int) {
		if len(parent) >= maxDepth {
			return
		}
		for r := 0; r < s.MaxRank; r++ {
			p := append(slices.Clone(parent), r)
			cands = append(cands, cand{p, count(p)})
		}
	}
	addChildren(nil)
	var out []TreeNode
	for len(out) < nodes && len(cands) > 0 {
		sort.SliceStable(cands, func(a, b int) bool { return cands[a].v > cands[b].v })
		best := cands[0]
		cands = cands[1:]
		if best.v <= 0 {
			break
		}
		out = append(out, TreeNode{Path: best.path, Value: best.v})
		addChildren(best.path)
	}
	return out
}

// PathValue is the fraction of positions at which every head on path
// ranked the target's continuation exactly as the path says: the path's
// contribution to the expected tokens per step (a tree's expected τ is 1 +
// the sum over its paths). Tuning a tree on one set of prompts and scoring
// it with another set's PathValue gives an unbiased expected τ.
func (s *Stats) PathValue(path []int) float64 {
	if len(path) > s.Heads {
		return 0
	}
	c := 0
	for _, rk := range s.Ranks {
		ok := true
		for d, r := range path {
			if int(rk[d]) != r {
				ok = false
				break
			}
		}
		if ok {
			c++
		}
	}
	return float64(c) / float64(max(len(s.Ranks), 1))
}

// ReadPrompts reads a prompts file: lines "kind<TAB>text" (kind is a label,
// e.g. code or text), '#' comments; in text \t, \n and \\ are escapes.
func ReadPrompts(path string) ([]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		_, body, ok := strings.Cut(line, "\t")
		if !ok {
			continue
		}
		var b strings.Builder
		for i := 0; i < len(body); i++ {
			if body[i] == '\\' && i+1 < len(body) {
				switch body[i+1] {
				case 't':
					b.WriteByte('\t')
					i++
					continue
				case 'n':
					b.WriteByte('\n')
					i++
					continue
				case '\\':
					b.WriteByte('\\')
					i++
					continue
				}
			}
			b.WriteByte(body[i])
		}
		if b.Len() > 0 {
			out = append(out, b.String())
		}
	}
	return out, nil
}
