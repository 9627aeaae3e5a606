package speculative

import "github.com/specgate/specgate/engine"

// WithProposers makes r draft with ps (model-free proposers such as Suffix
// and Known) for tenant, with the caller's known drafts (an OpenAI
// prediction, a cache near miss). The engine verifies their trees in its
// batched step and splits its draft budget between them by acceptance.
func WithProposers(r *engine.GenerateRequest, ps []engine.Proposer, tenant string, known []engine.KnownDraft) {
	r.Proposers = append(r.Proposers, ps...)
	r.Tenant, r.KnownDrafts = tenant, known
}
