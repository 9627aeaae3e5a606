package gateway

import (
	"strings"
	"sync"

	"github.com/specgate/specgate/tokenizer"
)

// promptMemo remembers the prompt tokens of recent chat requests per local
// model: rendering the chat template and tokenizing (twice, see
// renderPrompt) was a fifth of an exact cache hit's CPU, and a repeated
// question repeats its messages exactly. Two generations of at most
// promptMemoBytes each: when the current one fills up it becomes the old
// one and the old one is dropped. Rendering is deterministic, so a memo hit
// returns exactly what renderPrompt would.
type promptMemo struct {
	mu       sync.Mutex
	cur, old map[promptKey][]int32
	curBytes int
}

type promptKey struct {
	m    *LocalModel
	msgs string
}

const (
	promptMemoBytes  = 8 << 20 // per generation
	promptMemoMaxKey = 16 << 10
)

// render returns a copy of the prompt tokens of msgs for m (the caller may
// keep and modify it).
func (pm *promptMemo) render(m *LocalModel, msgs []tokenizer.Message) ([]int32, error) {
	n := 0
	for _, x := range msgs {
		n += len(x.Role) + len(x.Content) + 2
	}
	if n > promptMemoMaxKey {
		return renderPrompt(m.Tokenizer, msgs)
	}
	var b strings.Builder
	b.Grow(n)
	for _, x := range msgs {
		b.WriteString(x.Role)
		b.WriteByte(0)
		b.WriteString(x.Content)
		b.WriteByte(1)
	}
	k := promptKey{m, b.String()}
	pm.mu.Lock()
	p, ok := pm.cur[k]
	if !ok {
		p, ok = pm.old[k]
	}
	pm.mu.Unlock()
	if ok {
		return append([]int32(nil), p...), nil
	}
	p, err := renderPrompt(m.Tokenizer, msgs)
	if err != nil {
		return nil, err
	}
	size := len(k.msgs) + 4*len(p) + 64
	pm.mu.Lock()
	if pm.cur == nil || pm.curBytes+size > promptMemoBytes {
		pm.old, pm.cur, pm.curBytes = pm.cur, map[promptKey][]int32{}, 0
	}
	pm.cur[k] = append([]int32(nil), p...)
	pm.curBytes += size
	pm.mu.Unlock()
	return p, nil
}
