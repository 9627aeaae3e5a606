package gateway

import (
	"net"
	"sync"
	"time"
)

// watchDelay is how long a request runs before its connection is watched
// for a client hang-up. Cache hits and quick upstream answers finish
// sooner and so never start the watcher's goroutine or touch the socket's
// deadlines; generations and slow upstreams are watched from then on.
const watchDelay = 10 * time.Millisecond

// lazyWatch is a connWatch started only after watchDelay.
type lazyWatch struct {
	mu      sync.Mutex
	t       *time.Timer
	w       *connWatch
	stopped bool
}

// watchConnLazily watches conn like watchConn, from watchDelay on. conn may
// be nil (no watch).
func watchConnLazily(conn net.Conn, onClose func()) *lazyWatch {
	lw := &lazyWatch{}
	if conn == nil {
		return lw
	}
	lw.t = time.AfterFunc(watchDelay, func() {
		lw.mu.Lock()
		defer lw.mu.Unlock()
		if !lw.stopped {
			lw.w = watchConn(conn, onClose)
		}
	})
	return lw
}

// stop ends the watch (or cancels it before it started) and restores the
// connection for keep-alive reuse. Safe to call more than once.
func (lw *lazyWatch) stop() {
	lw.mu.Lock()
	lw.stopped = true
	w := lw.w
	lw.mu.Unlock()
	if lw.t != nil {
		lw.t.Stop()
	}
	if w != nil {
		w.stop()
	}
}
