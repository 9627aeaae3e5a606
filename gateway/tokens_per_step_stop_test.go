package gateway

import (
	"encoding/json"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/specgate/specgate/speculative"
)

// TestSpecTokensPerStepStopInPath: specgate_spec_tokens_per_step when the
// caller stops inside an accepted path (a stop string in the middle of a
// prediction of the whole answer): the last forward's own token is not
// taken, and the engine may have run one more step ahead of the caller.
// The reference is again the decode forwards counted at the target's
// backend for these requests; the gauge was decode tokens over
// (decode tokens - accepted), which drops every such forward.
func TestSpecTokensPerStepStopInPath(t *testing.T) {
	fb, ts := decodeForwardsServer(t, 8)
	const maxTokens = 40
	noCache := map[string]string{"Cache-Control": "no-cache, no-store"}
	var dec, forwards float64
	tried := 0
	for _, prompt := range speculative.BenchPrompts() {
		if tried == 3 {
			break
		}
		b, _ := json.Marshal(map[string]any{"model": "specgate-target", "temperature": 0, "max_tokens": maxTokens,
			"messages": []map[string]string{{"role": "user", "content": prompt}}})
		base := string(b[:len(b)-1])
		plain := chatDraft(t, ts.URL, "", base+`}`, map[string]string{"Cache-Control": "no-cache, no-store", HeaderSpeculation: "off"})
		words := strings.Fields(plain.content)
		if len(words) < 8 {
			continue
		}
		// a stop string past the first tree: a word of the last third
		// that does not occur before it
		stop := ""
		for _, w := range words[2*len(words)/3:] {
			if i := strings.Index(plain.content, w); i > len(plain.content)/2 {
				stop = w
				break
			}
		}
		if stop == "" {
			continue
		}
		tried++
		want := plain.content[:strings.Index(plain.content, stop)]
		pred, _ := json.Marshal(map[string]any{"type": "content", "content": plain.content})
		st, _ := json.Marshal([]string{stop})
		before := fb.n.Load()
		got := chatDraft(t, ts.URL, "", base+`,"stop":`+string(st)+`,"prediction":`+string(pred)+`}`, noCache)
		fw := fb.n.Load() - before
		sp := got.usage.Speculative
		if got.content != want || sp == nil || sp.Steps == 0 {
			t.Fatalf("stop %q: %q (want %q), usage %+v spec %+v", stop, got.content, want, got.usage, sp)
		}
		t.Logf("stop %q after %d of %d chars: %d decode tokens in %d backend decode forwards; usage steps %d accepted %d",
			stop, len(want), len(plain.content), got.usage.CompletionTokens-1, fw, sp.Steps, sp.Accepted)
		dec += float64(got.usage.CompletionTokens - 1)
		forwards += float64(fw)
	}
	if tried == 0 {
		t.Skip("no bench prompt with a usable stop word")
	}
	want := dec / forwards
	v := regexp.MustCompile(`(?m)^specgate_spec_tokens_per_step\{model="specgate-target"\} (\S+)$`).FindStringSubmatch(metricsText(t, ts.URL))
	if v == nil {
		t.Fatalf("/metrics lacks specgate_spec_tokens_per_step (want %.6f: %.0f decode tokens in %.0f target decode forwards)", want, dec, forwards)
	}
	got, err := strconv.ParseFloat(v[1], 64)
	if err != nil || math.Abs(got-want) > 1e-9*want {
		t.Fatalf("specgate_spec_tokens_per_step %s, want %.6f (%.0f decode tokens in %.0f target decode forwards)", v[1], want, dec, forwards)
	}
}

// TestSpecTokensPerStepChoices: with n choices a request's usage sums the
// choices' completion tokens, each of which has its first token from the
// prefill: decode tokens are completion tokens - n, not - 1. Reference:
// the decode forwards counted at the target's backend and each choice's
// decode tokens (the choices of a greedy request are equal).
func TestSpecTokensPerStepChoices(t *testing.T) {
	fb, ts := decodeForwardsServer(t, 16)
	const maxTokens, n = 40, 3
	b, _ := json.Marshal(map[string]any{"model": "specgate-target", "temperature": 0, "max_tokens": maxTokens,
		"messages": []map[string]string{{"role": "user", "content": speculative.BenchPrompts()[0]}}})
	base := string(b[:len(b)-1])
	plain := chatDraft(t, ts.URL, "", base+`}`, map[string]string{"Cache-Control": "no-cache, no-store", HeaderSpeculation: "off"})
	pred, _ := json.Marshal(map[string]any{"type": "content", "content": plain.content})
	before := fb.n.Load()
	got := chatDraft(t, ts.URL, "", base+`,"n":`+strconv.Itoa(n)+`,"prediction":`+string(pred)+`}`, map[string]string{"Cache-Control": "no-cache, no-store"})
	fw := float64(fb.n.Load() - before)
	sp := got.usage.Speculative
	if sp == nil || sp.Steps == 0 || got.usage.CompletionTokens != n*plain.usage.CompletionTokens {
		t.Fatalf("n=%d: usage %+v spec %+v (plain answer %d tokens)", n, got.usage, sp, plain.usage.CompletionTokens)
	}
	dec := float64(n * (plain.usage.CompletionTokens - 1))
	want := dec / fw
	v := regexp.MustCompile(`(?m)^specgate_spec_tokens_per_step\{model="specgate-target"\} (\S+)$`).FindStringSubmatch(metricsText(t, ts.URL))
	if v == nil {
		t.Fatal("/metrics lacks specgate_spec_tokens_per_step")
	}
	if g, err := strconv.ParseFloat(v[1], 64); err != nil || math.Abs(g-want) > 1e-9*want {
		t.Fatalf("specgate_spec_tokens_per_step %s, want %.6f (%d choices: %.0f decode tokens in %.0f target decode forwards)", v[1], want, n, dec, fw)
	}
}
