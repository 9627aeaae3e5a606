package backend

// RowSample asks a DeviceSampler backend to sample the single logits row of
// a ForwardRequest on the device. The engine fills the parameters; the
// backend writes Token and Logprob (and leaves ForwardRequest.Logits
// unwritten: the engine passes no Logits buffer with a Sample).
type RowSample struct {
	Temperature float32 // <= 0: argmax, lowest id on ties
	TopK        int     // 0 = off
	TopP        float32 // <= 0 or >= 1 = off
	MinP        float32 // 0 = off
	// PenaltyTokens[i] (distinct) has Penalty[i] subtracted from its logit:
	// count*FrequencyPenalty + PresencePenalty over the generated tokens.
	PenaltyTokens []int32
	Penalty       []float32
	// U is the uniform in [0,1) the draw inverts (unused when Temperature <= 0).
	U float64

	Token   int32   // result: the sampled token
	Logprob float32 // result: log-softmax of the raw logits at Token
}

// DeviceSampler is an optional Backend capability: Forward honours
// ForwardRequest.Sample (a request with Sample has exactly one logits row).
type DeviceSampler interface {
	SamplesOnDevice() bool
}
