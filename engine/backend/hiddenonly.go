package backend

// HiddenOnlyForwarder is a backend that accepts ForwardRequest.HiddenOnly:
// it fills the final hidden rows of such a request and skips its LM head.
// A proposer that projects a draft model's hidden state onto a restricted
// vocabulary itself (speculative.Config.VocabLimit: FR-Spec) needs it; the
// CPU backend is one.
type HiddenOnlyForwarder interface {
	ForwardsHiddenOnly() bool
}
