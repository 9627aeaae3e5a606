package gateway

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/specgate/specgate/engine"
)

// engineStatser is what a local model's Generator offers for metrics
// (engine.Engine does).
type engineStatser interface {
	Stats() engine.Stats
}

// engineCollector exports a local engine's scheduler and speculation
// counters at scrape time (one Stats snapshot per scrape and model).
type engineCollector struct {
	models []*LocalModel
}

var (
	engStepsDesc = prometheus.NewDesc("specgate_engine_steps_total",
		"Scheduler steps run by the local engine.", []string{"model"}, nil)
	engForwardsDesc = prometheus.NewDesc("specgate_engine_target_forwards_total",
		"Batched target forwards; over specgate_engine_steps_total: target forwards per step (1 at most).", []string{"model"}, nil)
	engRunningDesc = prometheus.NewDesc("specgate_engine_requests_running",
		"Requests holding KV memory in the engine.", []string{"model"}, nil)
	engWaitingDesc = prometheus.NewDesc("specgate_engine_requests_waiting",
		"Requests waiting for KV memory (not yet admitted, or preempted).", []string{"model"}, nil)
	engPreemptDesc = prometheus.NewDesc("specgate_engine_preemptions_total",
		"Running requests whose KV was given back under memory pressure (recomputed later).", []string{"model"}, nil)
	engSatOutDesc = prometheus.NewDesc("specgate_engine_sat_out_total",
		"Running requests a scheduler step did not serve because their caller had not yet taken its last two outputs (a slow reader), "+
			"summed over steps; they keep their KV and join a later step. Over specgate_engine_steps_total: requests sat out per step.", []string{"model"}, nil)
	specTreesDesc = prometheus.NewDesc("specgate_spec_verified_trees_total",
		"Draft trees verified inside the engine's batched forwards.", []string{"model"}, nil)
	specBudgetDesc = prometheus.NewDesc("specgate_spec_budget_tokens_total",
		"Draft tokens the engine's per-step verification budget granted and verified.", []string{"model"}, nil)
	specDepthDesc = prometheus.NewDesc("specgate_spec_accepted_at_depth_total",
		"Accepted draft tokens by depth in the tree (1 = right after the pending token).", []string{"model", "depth"}, nil)
	specErrDesc = prometheus.NewDesc("specgate_spec_propose_errors_total",
		"Steps in which a proposer failed or returned an invalid tree for a request (it then decoded plainly).", []string{"model"}, nil)
)

func (c *engineCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{engStepsDesc, engForwardsDesc, engRunningDesc, engWaitingDesc, engPreemptDesc, engSatOutDesc,
		specTreesDesc, specBudgetDesc, specDepthDesc, specErrDesc} {
		ch <- d
	}
}

func (c *engineCollector) Collect(ch chan<- prometheus.Metric) {
	for _, lm := range c.models {
		es, ok := lm.Generator.(engineStatser)
		if !ok {
			continue
		}
		st := es.Stats()
		m := lm.Name
		counter := func(d *prometheus.Desc, v int64, labels ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), append([]string{m}, labels...)...)
		}
		counter(engStepsDesc, st.Steps)
		counter(engForwardsDesc, st.Forwards)
		counter(engPreemptDesc, st.Preemptions)
		counter(engSatOutDesc, st.SatOut)
		counter(specTreesDesc, st.SpecSteps)
		counter(specBudgetDesc, st.SpecBudgetUsed)
		counter(specErrDesc, st.ProposeErrors)
		for d, v := range st.AcceptedAt {
			if v > 0 {
				counter(specDepthDesc, v, strconv.Itoa(d+1))
			}
		}
		ch <- prometheus.MustNewConstMetric(engRunningDesc, prometheus.GaugeValue, float64(st.Active-st.Waiting), m)
		ch <- prometheus.MustNewConstMetric(engWaitingDesc, prometheus.GaugeValue, float64(st.Waiting), m)
	}
}
