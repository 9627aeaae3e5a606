package engine

// Draft heads and greedy verification on the device (issue #17 point 5;
// owned by the GPU work). A backend that implements HeadsBackend runs a
// proposer's draft heads (Medusa) inside the target's forward, on the final
// hidden state of every logits row, and returns only each head's top-k
// tokens per row: no hidden row is copied to the host and no head runs on
// the CPU. A backend that implements RowArgmaxer returns the argmax of each
// logits row of a greedy request's verified tree instead of the rows
// themselves. With both, a Medusa step costs one forward (tree, heads,
// top-k, argmax) and a few kilobytes back.

// HeadsProposer is implemented by proposers whose heads can run on the
// backend (HeadsBackend): DeviceHeads returns their id on backend b, or 0
// when they run on the host there. The engine then asks the backend for
// the heads' top-k of the row that predicted the pending token
// (ProposeRequest.HeadTop) instead of the hidden row.
type HeadsProposer interface {
	DeviceHeads(b Backend) int
}

// initDeviceHeads (newSpecState) picks the first proposer whose heads run
// on the engine's backend.
func (e *Engine) initDeviceHeads(sp *specState) {
	for k, p := range sp.props {
		hp, ok := p.(HeadsProposer)
		if !ok {
			continue
		}
		if id := hp.DeviceHeads(e.m.backend); id > 0 {
			if hb, ok := e.m.backend.(HeadsBackend); ok && hb.HeadsWidth(id) > 0 {
				sp.headsID, sp.headsW, sp.headsK = id, hb.HeadsWidth(id), k
				return
			}
		}
	}
}

// deviceHeads turns an item's hidden-row request into a device-heads one
// when the request's heads run on the backend.
func (e *Engine) deviceHeads(r *request, it *BatchItem) {
	if r.spec == nil || r.spec.headsID == 0 || !it.WantHidden {
		return
	}
	it.WantHidden, it.Heads = false, r.spec.headsID
}

// argmaxOnly makes a tree item of a plain-greedy request (temperature 0,
// no penalties, no logprobs) return its rows' argmax instead of logits,
// where the backend can.
func (e *Engine) argmaxOnly(r *request, it *BatchItem) {
	ra, ok := e.m.backend.(RowArgmaxer)
	p := r.sampler
	if !ok || !ra.ArgmaxOnDevice() || p.Temperature > 0 || p.PresencePenalty != 0 || p.FrequencyPenalty != 0 ||
		p.Logprobs > 0 || !p.SkipLogprobs || it.Sample != nil {
		return
	}
	it.ArgmaxOnly = true
}

// keepHeadTop keeps the heads' top-k of logits row `row` of a finished item
// for the next Propose (cleared when the backend did not provide it).
func (sp *specState) keepHeadTop(it *BatchItem, row int) {
	if sp.headsW == 0 {
		return
	}
	w := sp.headsW
	if it.Heads == 0 || len(it.HeadTop) < (row+1)*w || it.HeadTop[row*w] < 0 {
		sp.headTop = sp.headTop[:0]
		return
	}
	sp.headTop = append(sp.headTop[:0], it.HeadTop[row*w:(row+1)*w]...)
}

// headTopBuf sizes an item's HeadTop for rows logits rows (nil without heads).
func (m *Model) headTopBuf(it *BatchItem, rows int) []int32 {
	if it.Heads == 0 {
		return nil
	}
	hb, ok := m.backend.(HeadsBackend)
	if !ok {
		return nil
	}
	n := rows * hb.HeadsWidth(it.Heads)
	if cap(it.HeadTop) < n {
		it.HeadTop = make([]int32, n)
	}
	it.HeadTop = it.HeadTop[:n]
	return it.HeadTop
}

// argmaxBuf sizes an ArgmaxOnly item's Argmax for rows logits rows.
func argmaxBuf(it *BatchItem, rows int) []int32 {
	if !it.ArgmaxOnly {
		return nil
	}
	if cap(it.Argmax) < rows {
		it.Argmax = make([]int32, rows)
	}
	it.Argmax = it.Argmax[:rows]
	return it.Argmax
}

// verifyArgmax is verifyTree's greedy walk (temperature 0, no penalties)
// over the rows' argmax tokens: argmax[0] is the target's token after the
// pending token, argmax[j+1] after node j.
func verifyArgmax(toks, parents, argmax []int32) verdict {
	// walkGreedy's walk without its child lists (a slice per node, every
	// step): children have larger indices than their parent, and the
	// first child in index order with the target's token is taken.
	var out verdict
	v := -1
	for {
		t := argmax[v+1]
		next := -1
		for i := v + 1; i < len(parents); i++ {
			if int(parents[i]) == v && toks[i] == t {
				next = i
				break
			}
		}
		if next < 0 {
			out.bonus = t
			return out
		}
		if out.path == nil {
			out.path = make([]int, 0, len(toks))
		}
		out.path = append(out.path, next)
		v = next
	}
}
