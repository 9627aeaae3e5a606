package engine

import (
	"context"
	"math/rand/v2"
	"testing"
)

// TestStatsActiveAfterGenerate: once Generate has returned, its request is
// no longer counted in Stats().Active (the scheduler counted it out before
// it let the caller go).
func TestStatsActiveAfterGenerate(t *testing.T) {
	m := NewRandomModel(genConfig(), 26, LoadOptions{KVTokens: 1024, BlockSize: 4, Threads: 1})
	e := New(m, Options{})
	defer e.Close()
	r := rand.New(rand.NewPCG(4, 4))
	for i := range 200 {
		p := randTokens(r, 6, m.Config.VocabSize)
		if _, _, err := collect(e, context.Background(), GenerateRequest{Prompt: p, MaxTokens: 1 + i%3}); err != nil {
			t.Fatal(err)
		}
		if st := e.Stats(); st.Active != 0 {
			t.Fatalf("request %d: Active %d after Generate returned", i, st.Active)
		}
	}
}
