package gateway

import (
	"maps"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

// Time saved by speculation (issue #11 point 5), per model and draft
// source, estimated the way the cache's saved seconds are: against this
// server's own plain decoding. For a request that speculated (at least one
// verified draft step):
//
//	saved = (completion tokens - 1) x p - its decode time
//
// p being the seconds per decode token of the model's requests that did
// not speculate, so far (no estimate before such a request ran). The
// request's saving is split by source: each source is credited its
// accepted tokens x p and charged the request's speculation overhead
// (accepted tokens x p - saved: verification, proposing, rejected nodes)
// in proportion to the nodes it proposed. A source whose drafts are never
// accepted thus shows a negative saving; the split sums to the request's.
var specSavedDesc = prometheus.NewDesc("specgate_spec_saved_seconds",
	"Estimated decode time speculation saved since start, by model and draft source (negative: it cost time): per request that speculated, "+
		"its decode tokens times the seconds per token of requests that did not, minus its decode time; a source is credited its accepted tokens "+
		"at that rate and charged the request's overhead by its share of proposed tokens.", []string{"model", "source"}, nil)

// specSaved accumulates the estimate; called with latencyMetrics.mu held,
// after g counted the request. decode is the request's decode seconds.
func (g *genTotals) addSpecSaved(u *Usage, decode float64) {
	sp := u.Speculative
	if sp == nil || sp.Steps == 0 || g.plainTokens <= 0 || g.plainSecs <= 0 {
		return
	}
	p := g.plainSecs / g.plainTokens
	saved := float64(max(u.CompletionTokens-1, 0))*p - decode
	if g.specSaved == nil {
		g.specSaved = map[string]float64{}
	}
	if len(sp.BySource) == 0 || sp.Proposed == 0 {
		g.specSaved["all"] += saved
		return
	}
	over := float64(sp.Accepted)*p - saved
	for _, src := range slices.Sorted(maps.Keys(sp.BySource)) {
		s := sp.BySource[src]
		g.specSaved[src] += float64(s.Accepted)*p - over*float64(s.Proposed)/float64(sp.Proposed)
	}
}

// collectSpecSaved exports the estimate of every model with one.
func (l *latencyMetrics) collectSpecSaved(ch chan<- prometheus.Metric) {
	for m, g := range l.gen {
		for src, v := range g.specSaved {
			ch <- prometheus.MustNewConstMetric(specSavedDesc, prometheus.GaugeValue, v, m, src)
		}
	}
}
