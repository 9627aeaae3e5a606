package engine

import (
	"slices"
	"testing"
	"time"
)

// TestAdmissionSkipsBlockedHead: a preempted request at the head of the
// waiting list whose caller is maxAhead outputs behind does not keep a later
// request that fits from being admitted; once its caller catches up it is
// admitted before requests that came after it. A head that can be served
// but does not fit keeps its place: nothing behind it is admitted (FIFO).
func TestAdmissionSkipsBlockedHead(t *testing.T) {
	m := NewRandomModel(genConfig(), 21, LoadOptions{KVTokens: 256, BlockSize: 4, Threads: 2})
	e := New(m, Options{})
	e.Close() // the scheduler goroutine has ended: the test drives admission itself
	mk := func(prompt []int32) *request {
		r := &request{req: GenerateRequest{Prompt: prompt}, maxNew: 8, out: make(chan stepOut, maxAhead), released: make(chan struct{}), submitted: time.Now()}
		e.setup(r)
		return r
	}
	other := mk([]int32{3, 4, 5, 6, 7})
	running, waiting := e.admitWaiting(nil, []*request{other})
	if len(running) != 1 || len(waiting) != 0 {
		t.Fatalf("first request not admitted: running %d waiting %d", len(running), len(waiting))
	}

	// head: preempted while its caller is maxAhead outputs behind.
	head := mk([]int32{1, 2, 3, 4})
	e.admit(head)
	head.generated = []int32{9, 10}
	head.pending = maxAhead
	e.preempt(head)
	later := mk([]int32{8, 9, 10})
	running, waiting = e.admitWaiting(running, []*request{head, later})
	if !slices.Contains(running, later) {
		t.Fatalf("a request behind a head whose caller is behind was not admitted (waiting %d, running %d)", len(waiting), len(running))
	}
	if len(waiting) != 1 || waiting[0] != head || head.seq != nil {
		t.Fatalf("the blocked head must stay first in the waiting list, unadmitted")
	}

	// its caller catches up: it goes before a newer request.
	head.pending--
	third := mk([]int32{11, 12, 13})
	running, waiting = e.admitWaiting(running, append(waiting, third))
	if len(waiting) != 0 {
		t.Fatalf("%d still waiting", len(waiting))
	}
	if i, j := slices.Index(running, head), slices.Index(running, third); i < 0 || j < 0 || i > j || head.admitted > third.admitted {
		t.Fatalf("the head was not admitted before the newer request (positions %d, %d)", i, j)
	}

	// FIFO: a head that can be served but does not fit blocks later ones.
	big := mk(make([]int32, 255)) // 64 blocks + the watermark: more than the pool
	small := mk([]int32{14, 15})
	running, waiting = e.admitWaiting(running, []*request{big, small})
	if len(waiting) != 2 || slices.Contains(running, small) {
		t.Fatalf("a request was admitted ahead of a head waiting for KV (waiting %d)", len(waiting))
	}
	for _, r := range running {
		r.seq.Free()
	}
}
