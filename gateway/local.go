package gateway

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/tokenizer"
)

// endpoint distinguishes the two generation APIs.
type endpoint int

const (
	endpointChat endpoint = iota
	endpointCompletions
)

// job is one validated generation request against a local model: prompts ×
// n choices. Choice index i = prompt*n + j.
type job struct {
	ep           endpoint
	model        *LocalModel
	prompts      [][]int32
	chat         []chatMsg // chat requests: the normalised messages (normalize.go)
	echo         []string  // per prompt, text to prepend (completions echo)
	n            int
	gen          engine.GenerateRequest // template; Prompt and Seed set per choice
	seed         *int64
	logprobs     bool
	topLogprobs  int
	stream       bool
	includeUsage bool
	obs          *genObserver // token timings (metrics_latency.go); nil = none
	tenant       string
	user         *string
	drafts       *jobDrafts // model-free draft material (drafts.go); nil = none
	noSpec       bool       // X-Specgate-Speculation: off
}

func (j *job) choices() int { return len(j.prompts) * j.n }

// fallbackMaxTokens is what a request reserves for its completion when
// neither it nor the model bounds the length and the model's context
// length is unknown.
const fallbackMaxTokens = 4096

// reserveTokens is what the job takes from its key's tokens-per-minute
// budget at admission: every choice's prompt plus its max_tokens (the
// model's default_max_tokens when the request gives none, else the rest of
// the context).
func (j *job) reserveTokens() int {
	n := 0
	for i := 0; i < j.choices(); i++ {
		p := len(j.prompts[i/j.n])
		m := j.gen.MaxTokens
		if m <= 0 {
			m = fallbackMaxTokens
			if j.model.ContextLength > p {
				m = j.model.ContextLength - p
			}
		}
		n += p + m
	}
	return n
}

// request builds the engine request of choice i.
func (j *job) request(i int) engine.GenerateRequest {
	r := j.gen
	r.Prompt = j.prompts[i/j.n]
	r.Stop = append([]string(nil), j.gen.Stop...)
	if j.seed != nil {
		sd := uint64(*j.seed) + uint64(i)
		r.Sampling.Seed = &sd
	}
	r.PrefixSalt = j.tenant
	r.Tenant = j.tenant
	// Without logprobs in the response the engine may decode several
	// greedy tokens per step (engine.Options.DecodeSteps).
	r.Sampling.SkipLogprobs = !j.logprobs
	j.attachDrafts(&r)
	return r
}

type commonParams struct {
	maxTokens   *int
	maxParam    string
	temperature *float64
	topP        *float64
	n           *int
	stop        *StopList
	presence    *float64
	frequency   *float64
	seed        *int64
	stream      *bool
	streamOpts  *StreamOptions
}

// applyCommon validates and copies the parameters both endpoints share.
func (s *Server) applyCommon(j *job, p commonParams) *APIError {
	j.n = 1
	if p.n != nil {
		if *p.n < 1 || *p.n > s.cfg.Server.MaxN {
			return errInvalid("n", "invalid_value", "Invalid 'n': integer must be between 1 and %d, got %d.", s.cfg.Server.MaxN, *p.n)
		}
		j.n = *p.n
	}
	sp := &j.gen.Sampling
	sp.Temperature = 1
	if p.temperature != nil {
		t := *p.temperature
		if math.IsNaN(t) || t < 0 || t > 2 {
			return errInvalid("temperature", "invalid_value", "Invalid 'temperature': number must be between 0 and 2, got %g.", t)
		}
		sp.Temperature = float32(t)
	}
	sp.TopP = 1
	if p.topP != nil {
		t := *p.topP
		if math.IsNaN(t) || t <= 0 || t > 1 {
			return errInvalid("top_p", "invalid_value", "Invalid 'top_p': number must be in (0, 1], got %g.", t)
		}
		sp.TopP = float32(t)
	}
	for _, pen := range []struct {
		name string
		v    *float64
		dst  *float32
	}{{"presence_penalty", p.presence, &sp.PresencePenalty}, {"frequency_penalty", p.frequency, &sp.FrequencyPenalty}} {
		if pen.v == nil {
			continue
		}
		if math.IsNaN(*pen.v) || *pen.v < -2 || *pen.v > 2 {
			return errInvalid(pen.name, "invalid_value", "Invalid '%s': number must be between -2 and 2, got %g.", pen.name, *pen.v)
		}
		*pen.dst = float32(*pen.v)
	}
	if p.maxTokens != nil {
		if *p.maxTokens < 1 {
			return errInvalid(p.maxParam, "invalid_value", "Invalid '%s': integer must be at least 1, got %d.", p.maxParam, *p.maxTokens)
		}
		j.gen.MaxTokens = *p.maxTokens
	} else {
		j.gen.MaxTokens = j.model.DefaultMaxTokens
	}
	if p.stop != nil {
		if len(*p.stop) > 4 {
			return errInvalid("stop", "invalid_value", "Invalid 'stop': at most 4 stop sequences, got %d.", len(*p.stop))
		}
		for _, st := range *p.stop {
			if st != "" {
				j.gen.Stop = append(j.gen.Stop, st)
			}
		}
	}
	j.seed = p.seed
	j.stream = p.stream != nil && *p.stream
	if p.streamOpts != nil {
		if !j.stream {
			return errInvalid("stream_options", "invalid_value", "Invalid 'stream_options': only allowed when 'stream' is true.")
		}
		j.includeUsage = p.streamOpts.IncludeUsage != nil && *p.streamOpts.IncludeUsage
	}
	return nil
}

// chatJob validates a chat request for a local model and renders its prompt.
func (s *Server) chatJob(m *LocalModel, r *ChatCompletionRequest) (*job, *APIError) {
	j := &job{ep: endpointChat, model: m}
	for _, f := range []struct {
		name string
		raw  []byte
	}{
		{"tools", r.Tools}, {"tool_choice", r.ToolChoice}, {"parallel_tool_calls", r.ParallelToolCalls},
		{"functions", r.Functions}, {"function_call", r.FunctionCall}, {"logit_bias", r.LogitBias},
		{"modalities", r.Modalities}, {"audio", r.Audio},
		{"reasoning_effort", r.ReasoningEffort}, {"web_search_options", r.WebSearchOptions},
	} {
		if present(f.raw) {
			return nil, errInvalid(f.name, "unsupported_parameter", "Unsupported parameter: '%s' is not supported by local model '%s'.", f.name, m.Name)
		}
	}
	if r.ResponseFormat != nil && r.ResponseFormat.Type != "" && r.ResponseFormat.Type != "text" {
		return nil, errInvalid("response_format", "unsupported_parameter", "Unsupported value: 'response_format' of type '%s' is not supported by local model '%s'.", r.ResponseFormat.Type, m.Name)
	}
	if r.MaxTokens != nil && r.MaxCompletionTokens != nil {
		return nil, errInvalid("max_tokens", "invalid_value", "Use either 'max_tokens' or 'max_completion_tokens', not both.")
	}
	p := commonParams{maxTokens: r.MaxTokens, maxParam: "max_tokens", temperature: r.Temperature, topP: r.TopP, n: r.N,
		stop: r.Stop, presence: r.PresencePenalty, frequency: r.FrequencyPenalty, seed: r.Seed, stream: r.Stream, streamOpts: r.StreamOptions}
	if r.MaxCompletionTokens != nil {
		p.maxTokens, p.maxParam = r.MaxCompletionTokens, "max_completion_tokens"
	}
	if err := s.applyCommon(j, p); err != nil {
		return nil, err
	}
	if r.Logprobs != nil && *r.Logprobs {
		j.logprobs = true
	}
	if r.TopLogprobs != nil {
		if *r.TopLogprobs < 0 || *r.TopLogprobs > 20 {
			return nil, errInvalid("top_logprobs", "invalid_value", "Invalid 'top_logprobs': integer must be between 0 and 20, got %d.", *r.TopLogprobs)
		}
		if !j.logprobs {
			return nil, errInvalid("top_logprobs", "invalid_value", "Invalid 'top_logprobs': 'logprobs' must be set to true when 'top_logprobs' is given.")
		}
		j.topLogprobs = *r.TopLogprobs
		j.gen.Sampling.Logprobs = j.topLogprobs
	}
	j.chat = normalizeChat(r.Messages)
	msgs, aerr := chatMessages(r.Messages, j.chat)
	if aerr != nil {
		return nil, aerr
	}
	prompt, err := s.prompts.render(m, msgs)
	if err != nil {
		return nil, errInvalid("messages", "invalid_value", "Could not apply the chat template of model '%s': %v", m.Name, err)
	}
	j.prompts = [][]int32{prompt}
	j.echo = []string{""}
	if aerr := checkContext(m, prompt, j.gen.MaxTokens, "messages"); aerr != nil {
		return nil, aerr
	}
	if aerr := j.setPrediction(r.Prediction); aerr != nil {
		return nil, aerr
	}
	return j, nil
}

// chatMessages checks what local models accept (roles, text-only content)
// and returns the engine's view of the normalised messages (normalize.go).
func chatMessages(in []ChatMessage, norm []chatMsg) ([]tokenizer.Message, *APIError) {
	if len(in) == 0 {
		return nil, errInvalid("messages", "invalid_value", "Invalid 'messages': empty array. Expected an array with minimum length 1.")
	}
	for i, m := range in {
		switch m.Role {
		case "system", "user", "assistant", "developer":
		case "":
			return nil, errInvalid(fmt.Sprintf("messages[%d].role", i), "missing_required_parameter", "Missing required parameter: 'messages[%d].role'.", i)
		case "tool", "function":
			return nil, errInvalid(fmt.Sprintf("messages[%d].role", i), "unsupported_parameter", "Unsupported value: 'messages[%d].role' '%s' needs tool support, which local models lack.", i, m.Role)
		default:
			return nil, errInvalid(fmt.Sprintf("messages[%d].role", i), "invalid_value", "Invalid value: '%s'. Supported values are: 'system', 'developer', 'user' and 'assistant'.", m.Role)
		}
		if present(m.ToolCalls) {
			return nil, errInvalid(fmt.Sprintf("messages[%d].tool_calls", i), "unsupported_parameter", "Unsupported parameter: 'messages[%d].tool_calls' needs tool support, which local models lack.", i)
		}
		if m.Content.absent {
			return nil, errInvalid(fmt.Sprintf("messages[%d].content", i), "missing_required_parameter", "Missing required parameter: 'messages[%d].content'.", i)
		}
		if m.Content.Parts != nil {
			for k, p := range m.Content.Parts {
				if p.Type != "text" {
					return nil, errInvalid(fmt.Sprintf("messages[%d].content[%d].type", i, k), "unsupported_parameter", "Unsupported content part type '%s': local models accept text only.", p.Type)
				}
				if p.Text == nil {
					return nil, errInvalid(fmt.Sprintf("messages[%d].content[%d].text", i, k), "missing_required_parameter", "Missing required parameter: 'messages[%d].content[%d].text'.", i, k)
				}
			}
		} else if m.Content.Null && norm[i].role != "assistant" {
			return nil, errInvalid(fmt.Sprintf("messages[%d].content", i), "invalid_type", "Invalid type for 'messages[%d].content': expected a string or an array, but got null.", i)
		}
	}
	return localMessages(norm), nil
}

// renderPrompt applies the model's chat template (or a plain "role: text"
// fallback for tokenizers without one) and tokenizes the result. Templates
// that write the BOS token themselves are encoded without adding another.
func renderPrompt(t Tokenizer, msgs []tokenizer.Message) ([]int32, error) {
	if !t.HasChatTemplate() {
		var b strings.Builder
		for _, m := range msgs {
			b.WriteString(m.Role)
			b.WriteString(": ")
			b.WriteString(m.Content)
			b.WriteString("\n")
		}
		b.WriteString("assistant:")
		return t.Encode(b.String(), true), nil
	}
	text, err := t.RenderChat(msgs, true)
	if err != nil {
		return nil, err
	}
	withSpecial := t.Encode(text, true)
	plain := t.Encode(text, false)
	// If adding specials doubles a BOS the template already wrote, keep plain.
	if len(withSpecial) >= 2 && len(plain) >= 1 && withSpecial[0] == withSpecial[1] && withSpecial[1] == plain[0] {
		return plain, nil
	}
	return withSpecial, nil
}

func checkContext(m *LocalModel, prompt []int32, maxTokens int, param string) *APIError {
	if m.ContextLength <= 0 {
		return nil
	}
	if len(prompt) >= m.ContextLength || len(prompt)+maxTokens > m.ContextLength {
		return errInvalid(param, "context_length_exceeded",
			"This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the prompt; %d for the completion). Please reduce the length of the prompt or completion.",
			m.ContextLength, len(prompt)+maxTokens, len(prompt), maxTokens)
	}
	return nil
}

// completionJob validates a legacy completion request for a local model.
func (s *Server) completionJob(m *LocalModel, r *CompletionRequest) (*job, *APIError) {
	j := &job{ep: endpointCompletions, model: m}
	if present(r.LogitBias) {
		return nil, errInvalid("logit_bias", "unsupported_parameter", "Unsupported parameter: 'logit_bias' is not supported by local model '%s'.", m.Name)
	}
	if r.Suffix != nil && *r.Suffix != "" {
		return nil, errInvalid("suffix", "unsupported_parameter", "Unsupported parameter: 'suffix' is not supported by local model '%s'.", m.Name)
	}
	p := commonParams{maxTokens: r.MaxTokens, maxParam: "max_tokens", temperature: r.Temperature, topP: r.TopP, n: r.N,
		stop: r.Stop, presence: r.PresencePenalty, frequency: r.FrequencyPenalty, seed: r.Seed, stream: r.Stream, streamOpts: r.StreamOptions}
	if r.MaxTokens == nil && m.DefaultMaxTokens == 0 {
		// OpenAI's legacy completions default to 16 tokens.
		sixteen := 16
		p.maxTokens = &sixteen
	}
	if err := s.applyCommon(j, p); err != nil {
		return nil, err
	}
	if r.BestOf != nil && *r.BestOf != j.n {
		return nil, errInvalid("best_of", "unsupported_parameter", "Unsupported parameter: 'best_of' different from 'n' is not supported by local model '%s'.", m.Name)
	}
	if r.Logprobs != nil {
		if *r.Logprobs < 0 || *r.Logprobs > 5 {
			return nil, errInvalid("logprobs", "invalid_value", "Invalid 'logprobs': integer must be between 0 and 5, got %d.", *r.Logprobs)
		}
		j.logprobs = true
		j.topLogprobs = *r.Logprobs
		j.gen.Sampling.Logprobs = *r.Logprobs
	}
	echo := r.Echo != nil && *r.Echo
	if echo && j.logprobs {
		return nil, errInvalid("echo", "unsupported_parameter", "Unsupported parameter: 'echo' together with 'logprobs' (prompt logprobs) is not supported by local model '%s'.", m.Name)
	}
	if r.Prompt == nil {
		return nil, errInvalid("prompt", "missing_required_parameter", "Missing required parameter: 'prompt'.")
	}
	switch {
	case r.Prompt.Tokens != nil:
		if len(r.Prompt.Tokens) > 64 {
			return nil, errInvalid("prompt", "invalid_value", "Invalid 'prompt': at most 64 prompts per request, got %d.", len(r.Prompt.Tokens))
		}
		for i, t := range r.Prompt.Tokens {
			if len(t) == 0 {
				return nil, errInvalid("prompt", "invalid_value", "Invalid 'prompt': prompt %d is empty.", i)
			}
			j.prompts = append(j.prompts, t)
			text := ""
			if echo {
				text = m.Tokenizer.Decode(t, false)
			}
			j.echo = append(j.echo, text)
		}
	default:
		if len(r.Prompt.Texts) == 0 {
			return nil, errInvalid("prompt", "invalid_value", "Invalid 'prompt': empty array.")
		}
		if len(r.Prompt.Texts) > 64 {
			return nil, errInvalid("prompt", "invalid_value", "Invalid 'prompt': at most 64 prompts per request, got %d.", len(r.Prompt.Texts))
		}
		for _, t := range r.Prompt.Texts {
			j.prompts = append(j.prompts, m.Tokenizer.Encode(t, true))
			text := ""
			if echo {
				text = t
			}
			j.echo = append(j.echo, text)
		}
	}
	if len(j.prompts)*j.n > 4*s.cfg.Server.MaxN {
		return nil, errInvalid("n", "invalid_value", "Invalid 'n': %d prompts × n=%d exceeds %d choices.", len(j.prompts), j.n, 4*s.cfg.Server.MaxN)
	}
	for _, pr := range j.prompts {
		if aerr := checkContext(m, pr, j.gen.MaxTokens, "prompt"); aerr != nil {
			return nil, aerr
		}
	}
	if aerr := j.setPrediction(r.Prediction); aerr != nil {
		return nil, aerr
	}
	return j, nil
}

// genEvent is one event of one choice: a chunk, or the end (done) with the
// result or error.
type genEvent struct {
	idx   int
	chunk engine.Chunk
	done  bool
	res   engine.Result
	err   error
}

// launch starts every choice of j in its own goroutine, sending events on
// the returned channel; it is closed after the last choice ended. Cancel ctx
// to stop them; the engine frees their KV before Generate returns.
func launch(ctx context.Context, gen engine.Generator, j *job) <-chan genEvent {
	out := launchPrep(ctx, j)
	ch := make(chan genEvent, 16*j.choices())
	var wg sync.WaitGroup
	for i := 0; i < j.choices(); i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			res, err := runChoice(ctx, gen, j, i, out, func(c engine.Chunk) error {
				select {
				case ch <- genEvent{idx: i, chunk: c}:
					return nil
				case <-ctx.Done():
					return context.Cause(ctx)
				}
			})
			ch <- genEvent{idx: i, done: true, res: res, err: err}
		}(i)
	}
	go func() { wg.Wait(); close(ch) }()
	return ch
}

// launchPrep is what every generation of j needs first: the cache near
// miss (on a miss only) and the per-choice completion token lists (for the
// prediction usage; drafts.go).
func launchPrep(ctx context.Context, j *job) [][]int32 {
	if j.drafts != nil && j.drafts.resolve != nil {
		j.drafts.resolve(ctx)
	}
	return j.drafts.outputs(j.choices())
}

// runChoice generates choice i of j in the calling goroutine, handing each
// chunk to deliver (out: launchPrep's token lists).
func runChoice(ctx context.Context, gen engine.Generator, j *job, i int, out [][]int32, deliver func(engine.Chunk) error) (engine.Result, error) {
	var last time.Time
	emit := func(c engine.Chunk) error {
		if out != nil {
			out[i] = append(out[i], c.Tokens...)
		}
		if len(c.Tokens) > 0 {
			now := time.Now()
			j.obs.chunk(last, now, len(c.Tokens))
			last = now
		}
		return deliver(c)
	}
	res, err := gen.Generate(ctx, j.request(i), emit)
	if err == nil && j.obs != nil {
		j.obs.queue.Observe(res.QueueTime.Seconds())
	}
	return res, err
}

// engineError maps an engine failure to an API error.
func engineError(err error, param string) *APIError {
	switch {
	case errors.Is(err, engine.ErrContextLength):
		return errInvalid(param, "context_length_exceeded", "%v", err)
	case errors.Is(err, engine.ErrBadRequest):
		return errInvalid("", "invalid_value", "%v", err)
	case errors.Is(err, engine.ErrKVExhausted):
		return errUnavailable("The engine is out of KV memory; retry shortly.", 1e9)
	case errors.Is(err, engine.ErrClosed), errors.Is(err, ErrShuttingDown):
		return errUnavailable("The engine is shutting down.", 1e9)
	}
	return errInternal(fmt.Sprintf("generation failed: %v", err))
}

// choiceAcc accumulates one choice.
type choiceAcc struct {
	text     strings.Builder
	tokens   []engine.TokenLogprob
	top      [][]engine.TokenLogprob
	res      engine.Result
	finished bool
}

func (a *choiceAcc) add(c engine.Chunk) {
	a.text.WriteString(c.Text)
	a.tokens = append(a.tokens, c.Logprobs...)
	if c.Top != nil {
		a.top = append(a.top, c.Top...)
	} else {
		for range c.Logprobs {
			a.top = append(a.top, nil)
		}
	}
}

// usageOf sums the results of all choices; prompt tokens count once per prompt.
func usageOf(j *job, res []engine.Result) *Usage {
	u := &Usage{PromptTokensDetails: &PromptTokensDetails{}, CompletionTokensDetails: &CompletionTokensDetails{}}
	spec := SpeculativeUsage{Exact: true}
	hasSpec := false
	for i, r := range res {
		if i%j.n == 0 {
			u.PromptTokens += r.PromptTokens
			u.PromptTokensDetails.CachedTokens += r.CachedTokens
		}
		u.CompletionTokens += r.CompletionTokens
		if r.Spec != nil {
			hasSpec = true
			spec.Steps += r.Spec.Steps
			spec.Proposed += r.Spec.Proposed
			spec.Accepted += r.Spec.Accepted
			spec.Forwards += r.Spec.Forwards
			spec.DecodeTokens += max(r.CompletionTokens-1, 0) // each choice's first token is its prefill's
			spec.Exact = spec.Exact && r.Spec.Exact
			for src, st := range r.Spec.BySource {
				if spec.BySource == nil {
					spec.BySource = map[string]SpeculativeSource{}
				}
				s := spec.BySource[src]
				s.Proposed += st.Proposed
				s.Accepted += st.Accepted
				spec.BySource[src] = s
			}
		}
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	if hasSpec {
		if spec.Steps > 0 {
			spec.MeanAcceptedLength = round4(float64(spec.Accepted) / float64(spec.Steps))
		}
		if spec.Proposed > 0 {
			spec.AcceptanceRate = round4(float64(spec.Accepted) / float64(spec.Proposed))
		}
		u.Speculative = &spec
	}
	predictionUsage(j, res, u)
	return u
}

func round4(x float64) float64 { return math.Round(x*1e4) / 1e4 }

func finishString(f engine.FinishReason) string {
	if f == engine.FinishLength {
		return "length"
	}
	return "stop"
}

func tokenBytes(s string) []int {
	b := make([]int, len(s))
	for i := 0; i < len(s); i++ {
		b[i] = int(s[i])
	}
	return b
}

// chatLogprobs converts engine logprobs to the chat format.
func chatLogprobs(toks []engine.TokenLogprob, top [][]engine.TokenLogprob) *ChatLogprobs {
	out := &ChatLogprobs{Content: make([]ChatTokenLogprob, 0, len(toks)), Refusal: nil}
	for i, t := range toks {
		e := ChatTokenLogprob{Token: t.Text, Logprob: float64(t.Logprob), Bytes: tokenBytes(t.Text), TopLogprobs: []TopLogprob{}}
		if i < len(top) {
			for _, a := range top[i] {
				e.TopLogprobs = append(e.TopLogprobs, TopLogprob{Token: a.Text, Logprob: float64(a.Logprob), Bytes: tokenBytes(a.Text)})
			}
		}
		out.Content = append(out.Content, e)
	}
	return out
}

// completionLogprobs converts engine logprobs to the legacy format; offset is
// the text offset of the first token within the choice's text.
func completionLogprobs(toks []engine.TokenLogprob, top [][]engine.TokenLogprob, offset int) *CompletionLogprobs {
	out := &CompletionLogprobs{Tokens: []string{}, TokenLogprobs: []float64{}, TopLogprobs: []map[string]float64{}, TextOffset: []int{}}
	for i, t := range toks {
		out.Tokens = append(out.Tokens, t.Text)
		out.TokenLogprobs = append(out.TokenLogprobs, float64(t.Logprob))
		m := map[string]float64{}
		if i < len(top) {
			for _, a := range top[i] {
				m[a.Text] = float64(a.Logprob)
			}
		}
		out.TopLogprobs = append(out.TopLogprobs, m)
		out.TextOffset = append(out.TextOffset, offset)
		offset += len(t.Text)
	}
	return out
}
