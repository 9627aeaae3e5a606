package gateway

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/specgate/specgate/cache"
)

// The response cache's writes run off the response path. A generated
// answer is handed to its flight's followers at once (storeAnswer), then
// queued here; a fixed pair of workers stores it in the cache after the
// handler has returned (so after fasthttp has written a JSON body, which it
// does after the handler, and after a stream's [DONE] and closing chunk).
// What the synchronous store guaranteed still holds:
//
//   - Read-your-writes. The answer is registered under its entry's key
//     (namespace and entry id) before the client can have the response; a
//     lookup that misses while the write is queued or running is answered
//     from it as an exact hit (cacheLookup), and a lookup that missed
//     because it read the store just before the write committed is
//     repeated (the completed writes of the last storeQueueRecent are
//     remembered with a sequence number taken before the lookup). So an
//     identical request sent after the response arrived hits. (A
//     paraphrase sent in the sub-millisecond window before the write
//     commits misses the semantic tier, as a request sent during the
//     generation always did.)
//   - Single flight: followers get the answer from the flight, as before,
//     before the write is queued.
//   - Durability: a write committed to SQLite survives kill -9 as before;
//     what changes is that a response can reach its client up to one queued
//     write earlier than the commit. Shutdown drains the queue (bounded
//     wait) after the handlers returned.
//   - Errors are logged and counted (specgate_cache_writes_total).
//
// The queue is bounded (storeQueueMaxJobs answers, storeQueueMaxBytes of
// bodies); when it is full or closed, the write runs inline, as before this
// queue existed, and is counted as such.
type storeQueue struct {
	s *Server

	once    sync.Once
	mu      sync.Mutex
	cond    *sync.Cond // signalled on a new job, a finished job and close
	jobs    []*storeJob
	head    int // jobs[head:] are queued
	bytes   int // body bytes queued or running
	active  int // jobs being stored by a worker
	closed  bool
	pending map[string]*storeJob // by entry key, queued or running
	npend   atomic.Int32         // len(pending), read without the lock
	seq     atomic.Uint64        // writes completed
	recent  [storeQueueRecent]recentWrite
}

// storeJob is one answer to write.
type storeJob struct {
	key  string // namespace NUL entry id ("" : not registered for lookups)
	put  func(ctx context.Context, body []byte, cost float64) error
	body []byte
	cost float64
}

// recentWrite is a completed write: its key and its sequence number.
type recentWrite struct {
	key string
	seq uint64
}

const (
	storeQueueWorkers  = 2
	storeQueueMaxJobs  = 1024
	storeQueueMaxBytes = 64 << 20
	storeQueueRecent   = 64
	storeQueueDrain    = 5 * time.Second // Shutdown's bound on draining
)

// storeMetrics are the queue's collectors (registered by newMetrics).
type storeMetrics struct {
	writes      *prometheus.CounterVec // mode (background|inline), result (ok|error|unavailable)
	queued      prometheus.Gauge
	pendingHits prometheus.Counter
	ofWrites    [2][3]prometheus.Counter
}

func newStoreMetrics() *storeMetrics {
	m := &storeMetrics{
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "specgate_cache_writes_total",
			Help: "Generated answers written to the response cache by the gateway, by mode (background: the store queue, after the response; inline: the queue was full or closed) and result (ok, error: logged, unavailable: the cache's breaker was open)."},
			[]string{"mode", "result"}),
		queued: prometheus.NewGauge(prometheus.GaugeOpts{Name: "specgate_cache_write_queue",
			Help: "Answers queued or being written to the response cache."}),
		pendingHits: prometheus.NewCounter(prometheus.CounterOpts{Name: "specgate_cache_pending_hits_total",
			Help: "Requests answered from an identical request's answer whose cache write was still queued (read-your-writes)."}),
	}
	for i, mode := range []string{"background", "inline"} {
		for k, res := range []string{"ok", "error", "unavailable"} {
			m.ofWrites[i][k] = m.writes.WithLabelValues(mode, res)
		}
	}
	return m
}

func (m *storeMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.writes, m.queued, m.pendingHits}
}

// enqueue queues a write, or runs it inline when the queue is full or
// closed.
func (q *storeQueue) enqueue(j *storeJob) {
	q.once.Do(q.start)
	q.mu.Lock()
	if q.closed || len(q.jobs)-q.head >= storeQueueMaxJobs || q.bytes+len(j.body) > storeQueueMaxBytes {
		q.mu.Unlock()
		q.run(j, 1)
		return
	}
	q.jobs = append(q.jobs, j)
	q.bytes += len(j.body)
	if j.key != "" {
		q.pending[j.key] = j
		q.npend.Store(int32(len(q.pending)))
	}
	q.s.met.store.queued.Inc()
	q.cond.Signal()
	q.mu.Unlock()
}

func (q *storeQueue) start() {
	q.mu.Lock()
	q.cond = sync.NewCond(&q.mu)
	q.pending = map[string]*storeJob{}
	q.mu.Unlock()
	for range storeQueueWorkers {
		go q.worker()
	}
}

func (q *storeQueue) worker() {
	q.mu.Lock()
	for {
		for q.head == len(q.jobs) && !q.closed {
			q.cond.Wait()
		}
		if q.head == len(q.jobs) {
			q.mu.Unlock()
			return
		}
		j := q.jobs[q.head]
		q.jobs[q.head] = nil
		q.head++
		switch {
		case q.head == len(q.jobs):
			q.jobs, q.head = q.jobs[:0], 0
		case q.head >= storeQueueMaxJobs && 2*q.head >= len(q.jobs):
			// A queue that never empties: drop the consumed prefix, so
			// the slice stays within twice the bound.
			n := copy(q.jobs, q.jobs[q.head:])
			clear(q.jobs[n:])
			q.jobs, q.head = q.jobs[:n], 0
		}
		q.active++
		q.mu.Unlock()

		ok := q.run(j, 0)

		q.mu.Lock()
		q.active--
		q.bytes -= len(j.body)
		if j.key != "" {
			if q.pending[j.key] == j {
				delete(q.pending, j.key)
				q.npend.Store(int32(len(q.pending)))
			}
			if ok {
				n := q.seq.Load() + 1
				q.recent[n%storeQueueRecent] = recentWrite{key: j.key, seq: n}
				q.seq.Store(n)
			}
		}
		q.s.met.store.queued.Dec()
		q.cond.Broadcast()
	}
}

// run writes one answer (mode 0: background, 1: inline) and counts it; ok
// reports a committed write.
func (q *storeQueue) run(j *storeJob, mode int) bool {
	err := j.put(context.Background(), j.body, j.cost)
	m := q.s.met.store
	switch {
	case err == nil:
		m.ofWrites[mode][0].Inc()
		return true
	case cacheSkipped(err):
		m.ofWrites[mode][2].Inc()
	default:
		m.ofWrites[mode][1].Inc()
		q.s.log.Warn("cache store failed", "err", err)
	}
	return false
}

// mark is the number of completed writes, taken before a lookup and given
// to answer after it.
func (q *storeQueue) mark() uint64 { return q.seq.Load() }

// answer is what a lookup of key that missed (having started at mark)
// should do: serve body (the key's write is queued or running), or look up
// again (retry: the key's write committed while the lookup ran, or too
// many writes completed to tell).
func (q *storeQueue) answer(key string, mark uint64) (body []byte, retry bool) {
	if q.npend.Load() == 0 && q.seq.Load() == mark {
		return nil, false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if j := q.pending[key]; j != nil {
		return j.body, false
	}
	n := q.seq.Load()
	if n-mark > storeQueueRecent {
		return nil, true
	}
	for s := n; s > mark; s-- {
		if q.recent[s%storeQueueRecent].key == key {
			return nil, true
		}
	}
	return nil, false
}

// drain waits until every queued write is done, at most d; stop stops
// the workers after that (later writes run inline). It reports whether the
// queue drained.
func (q *storeQueue) drain(d time.Duration, stop bool) bool {
	q.once.Do(q.start)
	done := make(chan struct{})
	go func() {
		q.mu.Lock()
		if stop {
			q.closed = true
			q.cond.Broadcast()
		}
		for q.head < len(q.jobs) || q.active > 0 {
			q.cond.Wait()
		}
		q.mu.Unlock()
		close(done)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// pendingHit turns a missed lookup into an exact hit served from body (an
// identical request's answer whose write is still queued).
func pendingHit(l cache.Lookup, body []byte) cache.Lookup {
	l.Hit, l.Tier, l.Similarity, l.Response, l.View, l.Reason = true, cache.TierExact, 1, body, nil, ""
	return l
}
