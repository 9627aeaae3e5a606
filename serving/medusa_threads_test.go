package serving

import (
	"io"
	"log/slog"
	"testing"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/medusa"
)

// TestMedusaHeadsGetCPUThreads: cpu.threads reaches the Medusa heads' CPU
// matmuls (the thread count Heads passes to every MulT), not only the
// target's backend; absent, both run on GOMAXPROCS (0).
func TestMedusaHeadsGetCPUThreads(t *testing.T) {
	for _, c := range []struct {
		cpu  string
		want int
	}{
		{"cpu: {threads: 1}\n", 1},
		{"cpu: {threads: 3}\n", 3},
		{"", 0},
	} {
		y := "name: m\npath: ../models/specgate-target\nbackend: cpu\nkv_blocks: 16\n" +
			"speculative: {method: medusa, heads: ../models/specgate-target-medusa}\n" + c.cpu
		mc := validModelConfig(t, y)
		var heads []*medusa.Heads
		m, err := Load(mc, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), EngineOptions: func(eo *engine.Options) {
			for _, p := range eo.Proposers {
				if mp, ok := p.(*medusa.Proposer); ok {
					heads = append(heads, mp.Heads())
				}
			}
		}})
		if err != nil {
			t.Fatalf("%q: %v", y, err)
		}
		if len(heads) != 1 {
			m.Close()
			t.Fatalf("%q: %d Medusa proposers in the engine options, want 1", y, len(heads))
		}
		if got := heads[0].Threads(); got != c.want {
			t.Errorf("%q: heads run their matmuls on %d threads (0 = GOMAXPROCS), want %d (the model's cpu.threads)", c.cpu, got, c.want)
		}
		m.Close()
	}
}
