package gateway

import (
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// latencyMetrics are the per-request timings people graph for vLLM
// (time to first token, inter-token latency, queue time, end-to-end
// latency, per model) and what the cache and speculation saved.
type latencyMetrics struct {
	e2e          *prometheus.HistogramVec // model, source
	itl          *prometheus.HistogramVec // model
	queue        *prometheus.HistogramVec // model
	savedTokens  *prometheus.CounterVec   // model
	savedSeconds *prometheus.CounterVec   // model

	mu  sync.Mutex
	gen map[string]*genTotals // per model: generated requests, for seconds-per-token and speculation

	e2eOf         *children[[2]string, prometheus.Observer] // model, source
	savedTokensOf *children[string, prometheus.Counter]
}

// genTotals accumulate what generated (not cached) requests of one model
// cost: wall time and completion tokens, and speculative decode steps.
type genTotals struct {
	seconds, tokens        float64
	specForwards           float64            // target decode forwards of requests that speculated
	plainSecs, plainTokens float64            // decode time and tokens of requests that did not
	specSecs, specDecTok   float64            // decode time and tokens (after the first) of requests that speculated
	specSaved              map[string]float64 // per draft source: estimated seconds saved (spec_saved.go)
}

// Latency histogram buckets: 1 ms to ~65 s, ×2.
var latencyBuckets = prometheus.ExponentialBuckets(0.001, 2, 17)

func newLatencyMetrics() *latencyMetrics {
	l := &latencyMetrics{
		e2e: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "specgate_e2e_request_latency_seconds",
			Help: "Time from request arrival to the last byte of the answer, local models, by model and source (engine: generated; cache: a cache hit; shared: joined an identical request's generation).", Buckets: latencyBuckets}, []string{"model", "source"}),
		itl: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "specgate_inter_token_latency_seconds",
			Help: "Time between consecutive generated tokens by model (tokens delivered together share their chunk's gap).", Buckets: prometheus.ExponentialBuckets(0.0001, 2, 17)}, []string{"model"}),
		queue: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "specgate_request_queue_time_seconds",
			Help: "Time a generation waited in the engine for admission (KV memory) by model.", Buckets: latencyBuckets}, []string{"model"}),
		savedTokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "specgate_cache_saved_tokens_total",
			Help: "Completion tokens answered from the semantic cache or a shared generation instead of being generated, by model."}, []string{"model"}),
		savedSeconds: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "specgate_cache_saved_seconds_total",
			Help: "Estimated generation time the cache saved, by model: per answered request, its completion tokens times the model's mean seconds per generated token so far, minus the time the answer took."}, []string{"model"}),
		gen: map[string]*genTotals{},
	}
	l.e2eOf = newChildren(func(k [2]string) prometheus.Observer { return l.e2e.WithLabelValues(k[0], k[1]) })
	l.savedTokensOf = newChildren(func(m string) prometheus.Counter { return l.savedTokens.WithLabelValues(m) })
	return l
}

// collectors lists what newMetrics registers, including the speedup gauges.
func (l *latencyMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{l.e2e, l.itl, l.queue, l.savedTokens, l.savedSeconds, &speedupCollector{l}}
}

// observer is handed to a job so launch can time its tokens.
type genObserver struct {
	itl, queue prometheus.Observer
}

func (l *latencyMetrics) observer(model string) *genObserver {
	return &genObserver{itl: l.itl.WithLabelValues(model), queue: l.queue.WithLabelValues(model)}
}

// chunk records the gap since the previous chunk of one choice, divided
// over the chunk's tokens; last is the previous chunk's time (zero for the
// first chunk, whose gap is the time to first token, not an inter-token gap).
func (o *genObserver) chunk(last, now time.Time, tokens int) {
	if o == nil || last.IsZero() || tokens == 0 {
		return
	}
	gap := now.Sub(last).Seconds() / float64(tokens)
	for range tokens {
		o.itl.Observe(gap)
	}
}

// finished records one request's end: e2e latency, and for generated
// requests the cost per token; for cache answers the tokens and estimated
// seconds saved. ttft is the time to the first token (0 when unknown).
func (l *latencyMetrics) finished(model, outcome string, usage *Usage, e2e, ttft time.Duration) {
	source := ""
	switch outcome {
	case "ok":
		source = "engine"
	case "cache_hit":
		source = "cache"
	case "shared":
		source = "shared"
	default:
		return // errors, disconnects, cancellations: no latency sample
	}
	l.e2eOf.of([2]string{model, source}).Observe(e2e.Seconds())
	if usage == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	g := l.gen[model]
	if g == nil {
		g = &genTotals{}
		l.gen[model] = g
	}
	if source == "engine" {
		g.seconds += e2e.Seconds()
		g.tokens += float64(usage.CompletionTokens)
		decode := (e2e - ttft).Seconds()
		if sp := usage.Speculative; sp != nil && sp.Steps > 0 {
			g.specSecs += decode
			g.specDecTok += float64(sp.DecodeTokens) // per choice: completion tokens - 1
			// the engine's count of the request's decode forwards, plain
			// or verifying (Spec.Steps counts only those with a tree);
			// decode tokens - accepted would miss a forward whose own
			// token the caller did not take (an end token or a stop
			// string inside an accepted path) and a step run ahead of it
			g.specForwards += float64(sp.Forwards)
			g.addSpecSaved(usage, decode)
		} else if usage.CompletionTokens > 1 {
			g.plainSecs += decode
			g.plainTokens += float64(usage.CompletionTokens - 1)
		}
		return
	}
	l.savedTokensOf.of(model).Add(float64(usage.CompletionTokens))
	if g.tokens > 0 {
		if saved := float64(usage.CompletionTokens)*g.seconds/g.tokens - e2e.Seconds(); saved > 0 {
			l.savedSeconds.WithLabelValues(model).Add(saved)
		}
	}
}

var (
	specTokensPerStepDesc = prometheus.NewDesc("specgate_spec_tokens_per_step",
		"Decode tokens (after the first) per target decode forward of requests that speculated, since start, by model: the speedup speculation would give if a verification step cost what a one-token step costs. "+
			"Forwards are the engine's count per request (plain or verifying; a step run ahead of a caller that stopped included).", []string{"model"}, nil)
	specSpeedupDesc = prometheus.NewDesc("specgate_spec_speedup",
		"Measured decode speedup of speculation, by model: seconds per token of requests without speculation over seconds per token of requests with it (since start; both kinds must have run).", []string{"model"}, nil)
)

// speedupCollector exports the speculation gauges computed from genTotals.
type speedupCollector struct{ l *latencyMetrics }

func (c *speedupCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- specTokensPerStepDesc
	ch <- specSpeedupDesc
	ch <- specSavedDesc
}

func (c *speedupCollector) Collect(ch chan<- prometheus.Metric) {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	c.l.collectSpecSaved(ch)
	for m, g := range c.l.gen {
		if g.specForwards > 0 {
			ch <- prometheus.MustNewConstMetric(specTokensPerStepDesc, prometheus.GaugeValue, g.specDecTok/g.specForwards, m)
		}
		if g.specDecTok > 0 && g.plainTokens > 0 && g.specSecs > 0 && g.plainSecs > 0 {
			v := (g.plainSecs / g.plainTokens) / (g.specSecs / g.specDecTok)
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				ch <- prometheus.MustNewConstMetric(specSpeedupDesc, prometheus.GaugeValue, v, m)
			}
		}
	}
}
