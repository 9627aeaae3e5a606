package cache

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
)

// EvalReport holds what WriteEvalReport printed.
type EvalReport struct {
	All, Tune, Holdout Quality // the default pipeline (threshold + guard)
	NoGuard            Quality // threshold only, all pairs
	TunedThreshold     float32 // best threshold on the tuning split (precision ≥ 0.99)
}

// WriteEvalReport scores pairs with emb, evaluates the pipeline at threshold
// (with the guard) on the tuning split, the held-out split and all pairs,
// then prints a threshold sweep. It is the body of `specgate cache-eval`.
func WriteEvalReport(ctx context.Context, w io.Writer, pairs []Pair, emb Embedder, threshold float32) (EvalReport, error) {
	var r EvalReport
	ss, err := ScorePairs(ctx, emb, pairs, false)
	if err != nil {
		return r, err
	}
	var tune, hold []Scored
	for _, s := range ss {
		if IsHoldout(s.Pair) {
			hold = append(hold, s)
		} else {
			tune = append(tune, s)
		}
	}
	pos := 0
	kinds := map[string]int{}
	for _, p := range pairs {
		if p.Label {
			pos++
		}
		kinds[p.Kind]++
	}
	fmt.Fprintf(w, "pairs: %d (%d positive, %d negative; tuning split %d, held-out split %d)\n", len(pairs), pos, len(pairs)-pos, len(tune), len(hold))
	fmt.Fprintf(w, "kinds: %s\n", fmtCounts(kinds))
	fmt.Fprintf(w, "embedder: %s, threshold %.2f, guard on\n\n", emb.Name(), threshold)

	r.Tune, r.Holdout, r.All = Evaluate(tune, threshold, true), Evaluate(hold, threshold, true), Evaluate(ss, threshold, true)
	r.NoGuard = Evaluate(ss, threshold, false)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "split\tpairs\tTP\tFP\tFN\tTN\tprecision\trecall\tF1\t")
	row := func(name string, n int, q Quality) {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%.4f\t%.4f\t%.4f\t\n", name, n, q.TP, q.FP, q.FN, q.TN, q.Precision, q.Recall, q.F1)
	}
	row("tuning", len(tune), r.Tune)
	row("held-out", len(hold), r.Holdout)
	row("all", len(ss), r.All)
	row("all, no guard", len(ss), r.NoGuard)
	tw.Flush()
	fmt.Fprintf(w, "\nfalse positives by kind (all, guard on): %s\n", fmtCounts(r.All.FalsePositiveKinds))
	fmt.Fprintf(w, "false positives by kind (all, no guard): %s\n", fmtCounts(r.NoGuard.FalsePositiveKinds))
	fmt.Fprintf(w, "guard rejections above threshold (all): %s\n\n", fmtCounts(r.All.GuardRejects))

	fmt.Fprintln(w, "threshold sweep (all pairs):")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "threshold\tP guard\tR guard\tF1 guard\tP no guard\tR no guard\tF1 no guard\t")
	for t := float32(0.40); t <= 0.951; t += 0.05 {
		g, n := Evaluate(ss, t, true), Evaluate(ss, t, false)
		fmt.Fprintf(tw, "%.2f\t%.4f\t%.4f\t%.4f\t%.4f\t%.4f\t%.4f\t\n", t, g.Precision, g.Recall, g.F1, n.Precision, n.Recall, n.F1)
	}
	tw.Flush()
	if best, ok := BestThreshold(tune, true, 0.30, 0.99, 0.99); ok {
		r.TunedThreshold = best.Threshold
		h := Evaluate(hold, best.Threshold, true)
		fmt.Fprintf(w, "\nbest threshold on the tuning split (precision ≥ 0.99, max recall): %.2f — tuning P=%.4f R=%.4f; held-out P=%.4f R=%.4f\n",
			best.Threshold, best.Precision, best.Recall, h.Precision, h.Recall)
	}
	return r, nil
}

func fmtCounts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var b strings.Builder
	for i, k := range ks {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s=%d", k, m[k])
	}
	return b.String()
}
