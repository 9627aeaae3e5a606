package cuda

import (
	"sync"
	"testing"
)

// TestStepTimeLogConcurrent: the engine's loop appends step times
// (recordEnd) while a benchmark's goroutine takes them (StepTimes): under
// -race the two must not race, and no time is lost or counted twice.
func TestStepTimeLogConcurrent(t *testing.T) {
	var l stepTimeLog
	const n = 2000
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range n {
			l.add(float64(i + 1))
		}
	}()
	got, sum := 0, 0.0
	for got < n {
		for _, s := range l.take() {
			got++
			sum += s
		}
	}
	wg.Wait()
	if rest := l.take(); got != n || len(rest) != 0 || sum != n*(n+1)/2 {
		t.Fatalf("took %d times (sum %v), %d left: want %d (sum %d), none left", got, sum, len(rest), n, n*(n+1)/2)
	}
}
