package kernels

import (
	"sync"
	"testing"
)

// SetTuning runs inside Do on the worker while Do's caller waits for the
// result: the caller must not read the tuning the worker writes (run with
// -race: Do read Tuning.HandoffSpin after handing the request over, a data
// race with SetTuning's write of the whole Tuning). No GPU: a stand-in
// worker runs the requests as Device.worker does.
func TestDoSetTuningNoRace(t *testing.T) {
	tu := mustDefaults(t, Tuning{})
	d := &Device{reqs: make(chan func(), 1), stopped: make(chan struct{}), tune: tu, spin: tu.HandoffSpin}
	d.c = Ctx{d}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			f, ok := d.next()
			if !ok {
				return
			}
			f()
		}
	}()
	for _, g := range []string{GemvDeep, GemvShallow, GemvDeep} {
		if err := d.Do(func(c *Ctx) error {
			_, err := c.SetTuning(Tuning{Gemv: g})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	d.mu.Lock()
	d.closed = true
	close(d.reqs)
	d.mu.Unlock()
	wg.Wait()
	if got := d.Tuning(); got.Gemv != GemvDeep || got.HandoffSpin != DefaultHandoffSpin {
		t.Fatalf("tuning after SetTuning: Gemv %q, HandoffSpin %v; want %q, %v", got.Gemv, got.HandoffSpin, GemvDeep, DefaultHandoffSpin)
	}
}
