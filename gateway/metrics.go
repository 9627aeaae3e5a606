package gateway

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
)

// metrics are the gateway's collectors, registered on the server's own
// registry (never the global one).
type metrics struct {
	httpRequests *prometheus.CounterVec   // route, code
	httpDuration *prometheus.HistogramVec // route
	inflight     prometheus.Gauge
	genRequests  *prometheus.CounterVec   // model, outcome
	tokens       *prometheus.CounterVec   // model, kind
	ttft         *prometheus.HistogramVec // model
	specSteps    *prometheus.CounterVec   // model
	specProposed *prometheus.CounterVec   // model
	specAccepted *prometheus.CounterVec   // model
	upstreamReqs *prometheus.CounterVec   // upstream, outcome
	upstreamTry  *prometheus.CounterVec   // upstream
	rateLimited  *prometheus.CounterVec   // tenant, limit
	disconnects  prometheus.Counter
	specSource   *prometheus.CounterVec // model, source, kind (proposed|accepted); drafts.go
	nearMiss     *prometheus.CounterVec // model, reason; drafts.go
	lat          *latencyMetrics        // metrics_latency.go
	store        *storeMetrics          // storeq.go

	// Children of the vectors every request touches (metrics_children.go).
	httpReqOf *children[routeCode, prometheus.Counter]
	httpDurOf *children[string, prometheus.Observer]
	genReqOf  *children[[2]string, prometheus.Counter]  // model, outcome
	ttftOf    *children[[2]string, prometheus.Observer] // model, source
}

// routeCode labels specgate_http_requests_total.
type routeCode struct {
	route string
	code  int
}

func newMetrics(reg *prometheus.Registry, models []*LocalModel) (*metrics, error) {
	m := &metrics{
		httpRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "specgate_http_requests_total",
			Help: "HTTP requests by route and status code."}, []string{"route", "code"}),
		httpDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "specgate_http_request_duration_seconds",
			Help: "Time to the response headers (streams: to the first token) by route.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}, []string{"route"}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "specgate_http_inflight_requests", Help: "Requests being handled."}),
		genRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "specgate_generation_requests_total",
			Help: "Local generation requests by model and outcome (ok, cache_hit, shared, error, disconnected, cancelled)."}, []string{"model", "outcome"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "specgate_tokens_total",
			Help: "Tokens by model and kind (prompt, completion, cached_prompt)."}, []string{"model", "kind"}),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "specgate_time_to_first_token_seconds",
			Help: "Time to the first token of the answer by model and source, for every local request, streamed or not (engine: generated; cache: a cache hit, whose whole answer is its first token; shared: joined an identical request's generation).", Buckets: latencyBuckets}, []string{"model", "source"}),
		specSteps: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "specgate_spec_steps_total",
			Help: "Speculative verification steps (target forwards in decode)."}, []string{"model"}),
		specProposed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "specgate_spec_proposed_tokens_total",
			Help: "Draft tokens proposed."}, []string{"model"}),
		specAccepted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "specgate_spec_accepted_tokens_total",
			Help: "Draft tokens accepted."}, []string{"model"}),
		upstreamReqs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "specgate_upstream_requests_total",
			Help: "Requests forwarded to upstreams by upstream and outcome (status class or error)."}, []string{"upstream", "outcome"}),
		upstreamTry: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "specgate_upstream_retries_total",
			Help: "Upstream retries after a 5xx or connection error."}, []string{"upstream"}),
		rateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "specgate_rate_limited_total",
			Help: "Requests refused with 429 by tenant and limit (requests, tokens)."}, []string{"tenant", "limit"}),
		disconnects: prometheus.NewCounter(prometheus.CounterOpts{Name: "specgate_client_disconnects_total",
			Help: "Local generations cancelled because the client closed the connection."}),
		specSource: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "specgate_spec_source_tokens_total",
			Help: "Draft tokens by model, draft source (draft, medusa, prompt, suffix, prediction, near_miss) and kind (proposed, accepted)."}, []string{"model", "source", "kind"}),
		nearMiss: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "specgate_cache_near_miss_drafts_total",
			Help: "Semantic-cache near misses whose answer became a draft, by model and reason (threshold, a guard reason, model)."}, []string{"model", "reason"}),
	}
	m.httpReqOf = newChildren(func(k routeCode) prometheus.Counter {
		return m.httpRequests.WithLabelValues(k.route, strconv.Itoa(k.code))
	})
	m.httpDurOf = newChildren(func(route string) prometheus.Observer { return m.httpDuration.WithLabelValues(route) })
	m.genReqOf = newChildren(func(k [2]string) prometheus.Counter { return m.genRequests.WithLabelValues(k[0], k[1]) })
	m.ttftOf = newChildren(func(k [2]string) prometheus.Observer { return m.ttft.WithLabelValues(k[0], k[1]) })
	cs := []prometheus.Collector{m.httpRequests, m.httpDuration, m.inflight, m.genRequests, m.tokens, m.ttft,
		m.specSteps, m.specProposed, m.specAccepted, m.upstreamReqs, m.upstreamTry, m.rateLimited, m.disconnects, m.specSource, m.nearMiss}
	m.lat = newLatencyMetrics()
	cs = append(cs, m.lat.collectors()...)
	m.store = newStoreMetrics()
	cs = append(cs, m.store.collectors()...)
	for _, lm := range models {
		if lm == nil || lm.KV == nil {
			continue
		}
		kv := lm.KV
		labels := prometheus.Labels{"model": lm.Name}
		cs = append(cs,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "specgate_kv_used_blocks", Help: "KV blocks held by sequences or the prefix cache.", ConstLabels: labels},
				func() float64 { return float64(kv.UsedBlocks()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "specgate_kv_cached_blocks", Help: "KV blocks held by the prefix cache.", ConstLabels: labels},
				func() float64 { return float64(kv.CachedBlocks()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "specgate_kv_blocks", Help: "KV blocks in total.", ConstLabels: labels},
				func() float64 { return float64(kv.NumBlocks()) }))
	}
	cs = append(cs, &engineCollector{models: models})
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("gateway: registering metrics: %w", err)
		}
	}
	// Process and Go runtime collectors, unless the caller registered them.
	_ = reg.Register(collectors.NewGoCollector())
	_ = reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m, nil
}

func (s *Server) handleMetrics(c *fiber.Ctx) error {
	h := promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg})
	return adaptor.HTTPHandler(h)(c)
}

// Sample is one series of the /stats JSON: labels and value (counters and
// gauges), or count and sum (histograms).
type Sample struct {
	Labels map[string]string `json:"labels,omitempty"`
	Value  float64           `json:"value"`
	Count  uint64            `json:"count,omitempty"`
	Sum    float64           `json:"sum,omitempty"`
}

// Stats is the /stats JSON the dashboard polls: every specgate_* series of
// the registry at one instant.
type Stats struct {
	Time    float64             `json:"time"` // unix seconds
	Uptime  float64             `json:"uptime_s"`
	Metrics map[string][]Sample `json:"metrics"`
}

func (s *Server) stats() (*Stats, error) {
	fams, err := s.reg.Gather()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	out := &Stats{Time: float64(now.UnixMilli()) / 1000, Uptime: now.Sub(s.started).Seconds(), Metrics: map[string][]Sample{}}
	for _, f := range fams {
		name := f.GetName()
		if len(name) < 9 || name[:9] != "specgate_" {
			continue
		}
		var ss []Sample
		for _, m := range f.GetMetric() {
			sm := Sample{}
			if lp := m.GetLabel(); len(lp) > 0 {
				sm.Labels = map[string]string{}
				for _, l := range lp {
					sm.Labels[l.GetName()] = l.GetValue()
				}
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				sm.Value = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				sm.Value = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				sm.Count, sm.Sum = h.GetSampleCount(), h.GetSampleSum()
				if sm.Count > 0 {
					sm.Value = sm.Sum / float64(sm.Count)
				}
			default:
				sm.Value = m.GetUntyped().GetValue()
			}
			if math.IsNaN(sm.Value) || math.IsInf(sm.Value, 0) {
				sm.Value = 0
			}
			ss = append(ss, sm)
		}
		sort.SliceStable(ss, func(i, j int) bool { return fmt.Sprint(ss[i].Labels) < fmt.Sprint(ss[j].Labels) })
		out.Metrics[name] = ss
	}
	return out, nil
}

func (s *Server) handleStats(c *fiber.Ctx) error {
	st, err := s.stats()
	if err != nil {
		return errInternal("gathering metrics: " + err.Error())
	}
	c.Set(fiber.HeaderCacheControl, "no-store")
	return c.JSON(st)
}
