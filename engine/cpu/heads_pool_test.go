package cpu

import (
	"sync"
	"testing"
	"time"

	"github.com/specgate/specgate/engine/backend"
)

// TestHeadsJobWithBusyPool: when every pool worker is busy as Forward
// queues its draft-heads job, the job waits in the pool's queue, where the
// forward's own goroutine (parallelFor runs queued tasks instead of idling,
// every pass fanning out here) may take it; the job then waits for final
// hidden rows that only that goroutine produces. Forward must still
// return, with the heads' candidates. (A hang is reported after 20 s: no
// speed is asserted.)
func TestHeadsJobWithBusyPool(t *testing.T) {
	cfg := testConfigs()["gqa"]
	w := RandomWeights(cfg, 5)
	hb, err := New(cfg, w, 256, Options{Threads: 2, MinParallelMACs: 1})
	if err != nil {
		t.Fatal(err)
	}
	rh := &recordHeads{w: 3}
	id, err := hb.AddRowHeads(rh)
	if err != nil {
		t.Fatal(err)
	}
	workers.once.Do(startWorkers)
	n := cap(workers.tasks) / 4 // startWorkers' worker count
	release, started := make(chan struct{}), make(chan struct{}, n)
	var busy sync.WaitGroup
	for range n {
		busy.Add(1)
		workers.tasks <- poolTask{fn: func(int, int) { started <- struct{}{}; <-release }, wg: &busy}
	}
	for range n {
		<-started // every worker runs a blocker: the queue is empty
	}
	V := cfg.VocabSize
	r := &backend.ForwardRequest{Tokens: []int32{3, 4}, Positions: []int32{0, 1}, Slots: []int32{0, 1},
		Logits: make([]float32, 2*V), Heads: id, HeadTop: make([]int32, 2*3)}
	done := make(chan error, 1)
	go func() { done <- hb.Forward([]*backend.ForwardRequest{r}) }()
	select {
	case err := <-done:
		close(release)
		busy.Wait()
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		close(release)
		t.Fatal("Forward did not return: its goroutine took its own heads job from the pool's queue and waits for its own hidden rows")
	}
	if len(rh.seen) != 2 {
		t.Fatalf("heads saw %d rows, want 2", len(rh.seen))
	}
	for i, c := range r.HeadTop {
		if c < 0 {
			t.Fatalf("HeadTop[%d] = %d: heads not run", i, c)
		}
	}
}
