package speculative

import (
	"context"
	"fmt"
	"testing"

	"github.com/specgate/specgate/engine"
)

// One tenant's bad predictions lower its own prior only: another tenant's
// fresh request gets the same confidence as on a proposer that never saw
// the first tenant.
func TestKnownSourcePriorPerTenant(t *testing.T) {
	poisoned, fresh := NewKnown(KnownConfig{}), NewKnown(KnownConfig{})
	draft := []int32{10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21}
	other := []int32{10, 11, 12, 90, 91, 92, 93, 94, 95, 96, 97, 98}
	step := func(k *Known, id engine.RequestID, tenant string, gen []int32) {
		t.Helper()
		_, err := k.Propose(context.Background(), []engine.ProposeRequest{{ID: id, Tenant: tenant, Generated: gen, Budget: 8, MaxDepth: 8,
			Known: []engine.KnownDraft{{Source: SourcePrediction, Tokens: draft}}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 {
		// tenant a's predictions are followed for 3 tokens, then not
		id := engine.RequestID(100 + i)
		step(poisoned, id, "a", other[:1])
		step(poisoned, id, "a", other[:5])
		poisoned.Release(id)
	}
	pa, pb := poisoned.prior("a", SourcePrediction), poisoned.prior("b", SourcePrediction)
	t.Logf("prediction priors after 10 bad requests of tenant a: a %.3f, b %.3f (default %.2f)", pa, pb, knownPrior)
	if !(pa < knownPrior-0.1) {
		t.Errorf("tenant a's prior %.3f, want below %.2f-0.1 (it learns from its own record)", pa, knownPrior)
	}
	if pb != knownPrior {
		t.Errorf("tenant b's prior %.3f, want the default %.2f (a's record is not b's)", pb, knownPrior)
	}
	// fresh requests of each tenant, aligned after their first token
	step(poisoned, 300, "b", draft[:1])
	step(fresh, 300, "b", draft[:1])
	step(poisoned, 301, "a", draft[:1])
	b, want, a := poisoned.Confidence(300, 1), fresh.Confidence(300, 1), poisoned.Confidence(301, 1)
	t.Logf("confidence: tenant b %.3f (on a proposer that never saw a: %.3f), tenant a %.3f", b, want, a)
	if b != want {
		t.Errorf("tenant b's confidence %.3f, want %.3f as if tenant a had never been served", b, want)
	}
	if !(a < b) {
		t.Errorf("tenant a's confidence %.3f, want below tenant b's %.3f", a, b)
	}
}

// The per-tenant records are bounded: past maxSrcRecords the least
// recently used record is evicted, and a record in use survives.
func TestKnownSourceRecordsBounded(t *testing.T) {
	k := NewKnown(KnownConfig{})
	k.record("keep", SourcePrediction, 0, 40)
	for i := range maxSrcRecords + 100 {
		k.record(fmt.Sprint("t", i), SourcePrediction, 5, 0)
		if i%100 == 0 {
			k.record("keep", SourcePrediction, 0, 1) // used again: recent
		}
	}
	if n := len(k.src.m); n != maxSrcRecords {
		t.Errorf("%d records, want %d", n, maxSrcRecords)
	}
	if _, ok := k.src.m[srcKey{"t0", SourcePrediction}]; ok {
		t.Errorf("the least recently used record (t0) survived")
	}
	if _, ok := k.src.m[srcKey{fmt.Sprint("t", maxSrcRecords+99), SourcePrediction}]; !ok {
		t.Errorf("the newest record was evicted")
	}
	if p := k.prior("keep", SourcePrediction); !(p < knownPrior-0.2) {
		t.Errorf("the record in use was evicted: prior %.3f", p)
	}
}
