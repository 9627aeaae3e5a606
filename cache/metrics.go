package cache

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the Prometheus collectors of one Cache. They are registered on
// the Registerer given with WithRegisterer, never globally. The "namespace"
// label is tenant/model (bounded by the gateway's tenants and models), not the
// full namespace with its system-prompt hash.
type metrics struct {
	lookups    *prometheus.CounterVec   // tier, namespace, result
	similarity *prometheus.HistogramVec // result (served, rejected)
	guard      *prometheus.CounterVec   // reason
	evictions  *prometheus.CounterVec   // reason
	latency    *prometheus.HistogramVec // result
	entries    *prometheus.GaugeVec     // namespace
	bytes      *prometheus.GaugeVec     // namespace
	stores     *prometheus.CounterVec   // namespace
	generates  *prometheus.CounterVec   // namespace, shared
	errors     *prometheus.CounterVec   // op
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		lookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "specgate_cache_lookups_total",
			Help: "Cache lookups by tier (exact, semantic, none), namespace (tenant/model) and result (hit, miss, bypass).",
		}, []string{"tier", "namespace", "result"}),
		similarity: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "specgate_cache_similarity",
			Help:    "Cosine similarity of the best semantic candidate, by outcome (served, threshold, guard).",
			Buckets: []float64{0.3, 0.4, 0.5, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 0.98, 1},
		}, []string{"outcome"}),
		guard: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "specgate_cache_guard_rejections_total",
			Help: "Semantic candidates above threshold rejected by the false-positive guard, by reason.",
		}, []string{"reason"}),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "specgate_cache_evictions_total",
			Help: "Entries removed by reason (capacity, bytes, ttl, replaced, stale).",
		}, []string{"reason"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "specgate_cache_lookup_seconds",
			Help:    "Cache lookup latency by result (hit-exact, hit-semantic, miss).",
			Buckets: prometheus.ExponentialBuckets(10e-6, 2, 14),
		}, []string{"result"}),
		entries: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "specgate_cache_entries",
			Help: "Live entries by namespace (tenant/model).",
		}, []string{"namespace"}),
		bytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "specgate_cache_bytes",
			Help: "Accounted entry bytes by namespace (tenant/model).",
		}, []string{"namespace"}),
		stores: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "specgate_cache_stores_total",
			Help: "Entries written by namespace (tenant/model).",
		}, []string{"namespace"}),
		generates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "specgate_cache_generations_total",
			Help: "Misses handed to the generator by Do; shared=true counts callers that joined an in-flight generation.",
		}, []string{"namespace", "shared"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "specgate_cache_errors_total",
			Help: "Store, index or embedder errors by operation.",
		}, []string{"op"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.lookups, m.similarity, m.guard, m.evictions, m.latency, m.entries, m.bytes, m.stores, m.generates, m.errors} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}
