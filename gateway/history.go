package gateway

// The dashboard's history: every historyInterval the server samples its own
// registry (cumulative counters, histogram buckets, gauges) into a ring that
// holds the last hour; GET /stats/history turns the ring into per-interval
// series (rates, hit rate, latency quantiles, speculation by source) for a
// window of up to an hour. The page's own polling is not counted: rates are
// of generation routes only.

import (
	"math"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
	dto "github.com/prometheus/client_model/go"
)

// historyInterval is the sampling period (a variable for tests).
var historyInterval = 5 * time.Second

const (
	historyKeep    = time.Hour
	quantileWindow = time.Minute // latency quantiles of a point cover the minute before it
)

// generationRoutes are the routes whose requests the dashboard counts.
var generationRoutes = map[string]bool{"/v1/chat/completions": true, "/v1/completions": true, "/v1/responses": true}

// histSample is the registry at one instant, reduced to what the page shows.
type histSample struct {
	t                                float64 // unix seconds
	requests, errors, hits           float64
	genTokens, savedTokens, savedSec float64
	cachedPrompt                     float64
	running, waiting                 float64
	engSteps, satOut                 float64 // engine steps and requests sat out in them (cumulative)
	e2e, ttft, itl                   hist
	spec                             map[string][2]float64 // source -> proposed, accepted
	specSteps, specTokensPerStep     float64
	specSpeedup                      float64
	specSaved                        map[string]float64 // source -> estimated seconds saved by speculation
}

// hist is a cumulative histogram summed over label sets: upper bounds and
// cumulative counts per bound (the +Inf count last).
type hist struct {
	bounds []float64
	counts []float64
	count  float64
}

func (h *hist) add(m *dto.Histogram) {
	bs := m.GetBucket()
	if h.bounds == nil {
		for _, b := range bs {
			h.bounds = append(h.bounds, b.GetUpperBound())
		}
		h.counts = make([]float64, len(bs))
	}
	if len(bs) != len(h.bounds) {
		return
	}
	for i, b := range bs {
		h.counts[i] += float64(b.GetCumulativeCount())
	}
	h.count += float64(m.GetSampleCount())
}

// quantile of the observations between a and b (b later), interpolated
// linearly inside the bucket; NaN without observations.
func quantile(a, b hist, q float64) float64 {
	n := b.count - a.count
	if n <= 0 || len(b.bounds) == 0 {
		return math.NaN()
	}
	at := func(h hist, i int) float64 {
		if i < len(h.counts) {
			return h.counts[i]
		}
		return 0
	}
	rank := q * n
	prevBound, prevCum := 0.0, 0.0
	for i, ub := range b.bounds {
		cum := at(b, i) - at(a, i)
		if cum >= rank {
			if cum == prevCum {
				return ub
			}
			return prevBound + (ub-prevBound)*(rank-prevCum)/(cum-prevCum)
		}
		prevBound, prevCum = ub, cum
	}
	return prevBound // beyond the last bound
}

type history struct {
	mu      sync.Mutex
	keep    int          // samples kept: an hour's worth
	samples []histSample // oldest first
}

func (s *Server) historyRing() *history {
	s.histOnce.Do(func() {
		s.hist = &history{keep: int(historyKeep/historyInterval) + 1}
		s.hist.add(s.sample())
		go func() {
			t := time.NewTicker(historyInterval)
			defer t.Stop()
			for {
				select {
				case <-s.baseCtx.Done():
					return
				case <-t.C:
					s.hist.add(s.sample())
				}
			}
		}()
	})
	return s.hist
}

func (h *history) add(x histSample) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.samples = append(h.samples, x)
	if len(h.samples) > h.keep {
		h.samples = append(h.samples[:0], h.samples[len(h.samples)-h.keep:]...)
	}
}

// sample reads the registry.
func (s *Server) sample() histSample {
	x := histSample{t: float64(time.Now().UnixMilli()) / 1000, spec: map[string][2]float64{}}
	fams, err := s.reg.Gather()
	if err != nil {
		return x
	}
	label := func(m *dto.Metric, name string) string {
		for _, l := range m.GetLabel() {
			if l.GetName() == name {
				return l.GetValue()
			}
		}
		return ""
	}
	var specProposed, specAccepted, localHits float64
	bySource, lookups := false, false
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
			switch f.GetName() {
			case "specgate_http_requests_total":
				if generationRoutes[label(m, "route")] {
					x.requests += v
					if code, _ := strconv.Atoi(label(m, "code")); code >= 500 {
						x.errors += v
					}
				}
			case "specgate_cache_lookups_total":
				lookups = true
				if label(m, "result") == "hit" {
					x.hits += v
				}
			case "specgate_generation_requests_total":
				if label(m, "outcome") == "cache_hit" {
					localHits += v
				}
			case "specgate_tokens_total":
				switch label(m, "kind") {
				case "completion":
					x.genTokens += v
				case "cached_prompt":
					x.cachedPrompt += v
				}
			case "specgate_cache_saved_tokens_total":
				x.savedTokens += v
			case "specgate_cache_saved_seconds_total":
				x.savedSec += v
			case "specgate_engine_requests_running":
				x.running += v
			case "specgate_engine_requests_waiting":
				x.waiting += v
			case "specgate_engine_steps_total":
				x.engSteps += v
			case "specgate_engine_sat_out_total":
				x.satOut += v
			case "specgate_e2e_request_latency_seconds":
				x.e2e.add(m.GetHistogram())
			case "specgate_time_to_first_token_seconds":
				x.ttft.add(m.GetHistogram())
			case "specgate_inter_token_latency_seconds":
				x.itl.add(m.GetHistogram())
			case "specgate_spec_source_tokens_total":
				bySource = true
				p := x.spec[label(m, "source")]
				if label(m, "kind") == "accepted" {
					p[1] += v
				} else {
					p[0] += v
				}
				x.spec[label(m, "source")] = p
			case "specgate_spec_proposed_tokens_total":
				specProposed += v
			case "specgate_spec_accepted_tokens_total":
				specAccepted += v
			case "specgate_spec_steps_total":
				x.specSteps += v
			case "specgate_spec_tokens_per_step":
				x.specTokensPerStep = math.Max(x.specTokensPerStep, v)
			case "specgate_spec_speedup":
				x.specSpeedup = math.Max(x.specSpeedup, v)
			case "specgate_spec_saved_seconds":
				if x.specSaved == nil {
					x.specSaved = map[string]float64{}
				}
				x.specSaved[label(m, "source")] += v
			}
		}
	}
	if !lookups {
		// The cache's own collectors are not on this registry: count the
		// local models' cache hits.
		x.hits = localHits
	}
	if !bySource && specProposed > 0 {
		x.spec["all"] = [2]float64{specProposed, specAccepted}
	}
	return x
}

// HistoryPoint is one interval of GET /stats/history. Quantiles and rates
// are null where the interval had no such event.
type HistoryPoint struct {
	T            float64            `json:"t"`               // end of the interval, unix seconds
	RPS          float64            `json:"rps"`             // generation requests per second
	ErrorsPS     float64            `json:"errors_ps"`       // of which 5xx per second
	HitRate      *float64           `json:"hit_rate"`        // cache hits / generation requests in the interval
	TokensPS     float64            `json:"tokens_ps"`       // completion tokens generated per second
	SavedPS      float64            `json:"saved_tokens_ps"` // completion tokens answered by the cache per second
	E2EP50       *float64           `json:"e2e_p50"`         // seconds, over the minute before T
	E2EP99       *float64           `json:"e2e_p99"`
	TTFTP50      *float64           `json:"ttft_p50"`
	TTFTP99      *float64           `json:"ttft_p99"`
	ITLP50       *float64           `json:"itl_p50"`
	Running      float64            `json:"running"`
	Waiting      float64            `json:"waiting"`
	SatOut       *float64           `json:"sat_out"`         // requests a step left out as their caller was behind, per engine step; null without steps
	SpecAccept   map[string]float64 `json:"spec_acceptance"` // per draft source: accepted / proposed in the interval
	SpecProposed map[string]float64 `json:"spec_proposed"`   // per draft source: proposed in the interval
}

// HistoryTotals are the counters since start (the page's headline numbers).
type HistoryTotals struct {
	Requests          float64            `json:"requests"`
	Hits              float64            `json:"cache_hits"`
	HitRate           float64            `json:"hit_rate"` // over all generation requests, cacheable or not
	GeneratedTokens   float64            `json:"generated_tokens"`
	SavedTokens       float64            `json:"saved_tokens"`
	SavedSeconds      float64            `json:"saved_seconds"`
	CachedPrompt      float64            `json:"prefix_cached_prompt_tokens"`
	SpecTokensPerStep float64            `json:"spec_tokens_per_step"`
	SpecSpeedup       float64            `json:"spec_speedup"`
	SpecBySource      map[string]float64 `json:"spec_acceptance_by_source"`
	SpecProposed      map[string]float64 `json:"spec_proposed_by_source"`
	// SpecSaved: estimated decode seconds speculation saved, per draft
	// source (spec_saved.go); SpecSavedSeconds is their sum.
	SpecSaved        map[string]float64 `json:"spec_saved_seconds_by_source"`
	SpecSavedSeconds float64            `json:"spec_saved_seconds"`
	// SatOut: requests steps did not serve because their callers were
	// behind, summed over the engines' steps (specgate_engine_sat_out_total).
	SatOut float64 `json:"sat_out"`
}

// History is GET /stats/history.
type History struct {
	Interval float64        `json:"interval_s"`
	Window   float64        `json:"window_s"`
	Version  VersionInfo    `json:"version"`
	Uptime   float64        `json:"uptime_s"`
	Points   []HistoryPoint `json:"points"`
	Totals   HistoryTotals  `json:"totals"`
}

func finite(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

func (h *history) build(window time.Duration, now histSample) History {
	h.mu.Lock()
	ss := append([]histSample(nil), h.samples...)
	h.mu.Unlock()
	ss = append(ss, now)
	out := History{Interval: historyInterval.Seconds(), Window: window.Seconds()}
	from := now.t - window.Seconds()
	for i := 1; i < len(ss); i++ {
		a, b := ss[i-1], ss[i]
		if b.t < from || b.t-a.t <= 0 {
			continue
		}
		dt := b.t - a.t
		p := HistoryPoint{T: b.t, RPS: (b.requests - a.requests) / dt, ErrorsPS: (b.errors - a.errors) / dt,
			TokensPS: (b.genTokens - a.genTokens) / dt, SavedPS: (b.savedTokens - a.savedTokens) / dt,
			Running: b.running, Waiting: b.waiting, SpecAccept: map[string]float64{}, SpecProposed: map[string]float64{}}
		if dr := b.requests - a.requests; dr > 0 {
			p.HitRate = finite(math.Min(1, (b.hits-a.hits)/dr))
		}
		if ds := b.engSteps - a.engSteps; ds > 0 {
			p.SatOut = finite((b.satOut - a.satOut) / ds)
		}
		// quantiles over the minute before b
		q := i - 1
		for q > 0 && b.t-ss[q].t < quantileWindow.Seconds() {
			q--
		}
		base := ss[q]
		p.E2EP50, p.E2EP99 = finite(quantile(base.e2e, b.e2e, 0.5)), finite(quantile(base.e2e, b.e2e, 0.99))
		p.TTFTP50, p.TTFTP99 = finite(quantile(base.ttft, b.ttft, 0.5)), finite(quantile(base.ttft, b.ttft, 0.99))
		p.ITLP50 = finite(quantile(base.itl, b.itl, 0.5))
		for src, v := range b.spec {
			prop := v[0] - a.spec[src][0]
			if prop > 0 {
				p.SpecProposed[src] = prop
				p.SpecAccept[src] = (v[1] - a.spec[src][1]) / prop
			}
		}
		out.Points = append(out.Points, p)
	}
	t := HistoryTotals{Requests: now.requests, Hits: now.hits, GeneratedTokens: now.genTokens, SavedTokens: now.savedTokens,
		SavedSeconds: now.savedSec, CachedPrompt: now.cachedPrompt, SpecTokensPerStep: now.specTokensPerStep, SpecSpeedup: now.specSpeedup,
		SpecBySource: map[string]float64{}, SpecProposed: map[string]float64{}, SpecSaved: map[string]float64{}, SatOut: now.satOut}
	for src, v := range now.specSaved {
		t.SpecSaved[src] = v
		t.SpecSavedSeconds += v
	}
	if now.requests > 0 {
		t.HitRate = math.Min(1, now.hits/now.requests)
	}
	srcs := make([]string, 0, len(now.spec))
	for src := range now.spec {
		srcs = append(srcs, src)
	}
	sort.Strings(srcs)
	for _, src := range srcs {
		v := now.spec[src]
		t.SpecProposed[src] = v[0]
		if v[0] > 0 {
			t.SpecBySource[src] = v[1] / v[0]
		}
	}
	out.Totals = t
	return out
}

// handleHistory serves GET /stats/history?window=SECONDS (default 900,
// at most an hour).
func (s *Server) handleHistory(c *fiber.Ctx) error {
	w := 15 * time.Minute
	if v := c.Query("window"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 10 || n > int(historyKeep.Seconds()) {
			return errInvalid("window", "invalid_value", "Invalid 'window': seconds between 10 and %d, got %q.", int(historyKeep.Seconds()), v)
		}
		w = time.Duration(n) * time.Second
	}
	h := s.historyRing().build(w, s.sample())
	h.Version = BuildVersion()
	h.Uptime = time.Since(s.started).Seconds()
	c.Set(fiber.HeaderCacheControl, "no-store")
	return c.JSON(h)
}
