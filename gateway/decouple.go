package gateway

import (
	"bufio"
	"sync"
)

// writeDecoupled runs produce (a stream's provider loop: the engine's
// events or an upstream's relay, which ends the stream's flight) with a
// writer that never blocks on the client: what produce writes is queued in
// memory and written to w, flushed, by the calling goroutine. A client that
// stops reading therefore slows only its own response, not the provider
// nor the requests waiting on its flight, which finishes when the answer is
// complete. Once a write to w fails (client gone), produce's writes fail
// too, as they did when it wrote to w directly. writeDecoupled returns when
// produce has returned and everything queued was written (or the client
// failed). The queue holds at most the answer produce writes, which its
// own bounds limit (max_tokens, maxUpstreamBody).
func writeDecoupled(w *bufio.Writer, produce func(w *bufio.Writer)) {
	q := &writeQueue{wake: make(chan struct{}, 1)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer q.close()
		pw := bufio.NewWriterSize(q, w.Size())
		produce(pw)
		_ = pw.Flush()
	}()
	failed := false
	for {
		b, closed := q.take()
		if len(b) > 0 && !failed {
			_, err := w.Write(b)
			if err == nil {
				err = w.Flush()
			}
			if err != nil {
				failed = true
				q.fail(err)
			}
		}
		if closed {
			break
		}
		<-q.wake
	}
	<-done
}

// writeQueue is writeDecoupled's queue: Write appends and never blocks.
type writeQueue struct {
	mu     sync.Mutex
	buf    []byte
	closed bool
	err    error
	wake   chan struct{} // capacity 1: a pending "something changed"
}

func (q *writeQueue) Write(p []byte) (int, error) {
	q.mu.Lock()
	if q.err != nil {
		q.mu.Unlock()
		return 0, q.err
	}
	q.buf = append(q.buf, p...)
	q.mu.Unlock()
	q.signal()
	return len(p), nil
}

func (q *writeQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// take hands over what is queued; closed reports that nothing more comes.
func (q *writeQueue) take() (b []byte, closed bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	b, q.buf = q.buf, nil
	return b, q.closed
}

func (q *writeQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.signal()
}

// fail makes later Writes return err and drops what is queued.
func (q *writeQueue) fail(err error) {
	q.mu.Lock()
	q.err = err
	q.buf = nil
	q.mu.Unlock()
}
