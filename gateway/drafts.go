package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"runtime"
	"strings"
	"sync"
	"weak"

	"github.com/gofiber/fiber/v2"

	"github.com/specgate/specgate/cache"
	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/speculative"
)

// Drafts are the model-free draft sources of a local model (issue #11):
// the tenant's earlier answers and the request's own prompt (suffix
// trees), the client's OpenAI `prediction`, and the answer of a
// semantic-cache near miss. The engine verifies every drafted token, so the
// output stays the model's own.
type Drafts struct {
	// Suffix drafts from the tenant's earlier answers and the request's
	// prompt; nil = off.
	Suffix *speculative.Suffix
	// Known drafts from predictions and near misses; nil = a default one.
	Known *speculative.Known
	// Base are the model's own proposers (engine.Options.Proposers: a
	// draft model, Medusa heads). A request's GenerateRequest.Proposers
	// replaces the engine's, so they are listed again beside the model-free
	// ones; the engine splits each step's budget between all of them by
	// their acceptance.
	Base []engine.Proposer
	// NearMissBand: a stored answer with similarity >= band that is not a
	// hit becomes a draft (0 = no near-miss drafts).
	NearMissBand float32
	// NearMissModels: other model names whose cached answers (same
	// tenant) may serve as drafts, e.g. upstreams.
	NearMissModels []string
	// NearMisses is how many near misses (their distinct answers) draft one
	// request, as one tree (0 = 1: on bench workload's paraphrase trace 3
	// gave no measurable gain, τ 1.47 vs 1.58 within the machine's noise).
	NearMisses int
	// MaxDraftTokens bounds a prediction or near-miss draft (0 = 8192).
	MaxDraftTokens int
}

// modelKnowns holds the Known proposer of each LocalModel that has no
// Drafts.Known of its own: one per model, never one for all, since every
// model's engine numbers its requests from 1 and a shared one would let two
// models' requests with the same id take over (and release) each other's
// draft cursors. Keyed weakly: a model's entry goes when the model does.
var modelKnowns sync.Map // weak.Pointer[LocalModel] -> *speculative.Known

// modelKnown returns m's Known proposer (made on first use).
func modelKnown(m *LocalModel) *speculative.Known {
	wp := weak.Make(m)
	if k, ok := modelKnowns.Load(wp); ok {
		return k.(*speculative.Known)
	}
	k, loaded := modelKnowns.LoadOrStore(wp, speculative.NewKnown(speculative.KnownConfig{}))
	if !loaded {
		runtime.AddCleanup(m, func(wp weak.Pointer[LocalModel]) { modelKnowns.Delete(wp) }, wp)
	}
	return k.(*speculative.Known)
}

// nearMisser is the optional cache capability (satisfied by *cache.Cache).
type nearMisser interface {
	NearMisses(ctx context.Context, req *cache.Request, band float32, models []string, k int) ([]cache.NearMiss, error)
}

// jobDrafts is one request's draft material.
type jobDrafts struct {
	prediction []int32 // tokenized prediction (nil: none)
	once       sync.Once
	creq       *cache.Request
	resolve    func(context.Context) // looks the near miss up (nil: none)
	nearMiss   [][]int32             // the near misses' answers, tokenized, best first
	out        [][]int32             // per choice, the completion's tokens (with a prediction)
}

// outputs allocates the per-choice completion token lists when the
// request has a prediction (nil otherwise; d may be nil).
func (d *jobDrafts) outputs(n int) [][]int32 {
	if d == nil || d.prediction == nil {
		return nil
	}
	d.out = make([][]int32, n)
	return d.out
}

// lcsMaxCells bounds the prediction usage's LCS table (tokens x tokens).
const lcsMaxCells = 1 << 25

// commonTokens is the length of the longest common subsequence of a and
// b: the prediction's tokens that appear in the completion, in order.
// ok is false when the table would exceed lcsMaxCells. A common prefix
// and suffix belong to a longest common subsequence, so they are counted
// without the table: a prediction the completion kept whole costs no
// table at all (160 x 160 cells were ~0.05 ms after every such request).
func commonTokens(a, b []int32) (n int, ok bool) {
	p := 0
	for p < len(a) && p < len(b) && a[p] == b[p] {
		p++
	}
	a, b = a[p:], b[p:]
	q := 0
	for q < len(a) && q < len(b) && a[len(a)-1-q] == b[len(b)-1-q] {
		q++
	}
	a, b = a[:len(a)-q], b[:len(b)-q]
	if len(a) == 0 || len(b) == 0 {
		return p + q, true
	}
	if len(a)*len(b) > lcsMaxCells {
		return 0, false
	}
	prev, cur := make([]int32, len(b)+1), make([]int32, len(b)+1)
	for i := range a {
		for j := range b {
			switch {
			case a[i] == b[j]:
				cur[j+1] = prev[j] + 1
			case prev[j+1] >= cur[j]:
				cur[j+1] = prev[j+1]
			default:
				cur[j+1] = cur[j]
			}
		}
		prev, cur = cur, prev
	}
	return p + q + int(prev[len(b)]), true
}

// parsePrediction validates OpenAI's `prediction` ({"type": "content",
// "content": string or array of text parts}) and returns its text.
func parsePrediction(raw json.RawMessage) (string, *APIError) {
	var p struct {
		Type    string          `json:"type"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return "", errInvalid("prediction", "invalid_type", "Invalid type for 'prediction': expected an object with 'type' and 'content'.")
	}
	if p.Type != "content" {
		return "", errInvalid("prediction.type", "invalid_value", "Invalid value: '%s'. Supported values are: 'content'.", p.Type)
	}
	if !present(p.Content) {
		return "", errInvalid("prediction.content", "missing_required_parameter", "Missing required parameter: 'prediction.content'.")
	}
	var mc MessageContent
	if err := json.Unmarshal(p.Content, &mc); err != nil || mc.Null {
		return "", errInvalid("prediction.content", "invalid_type", "Invalid type for 'prediction.content': expected a string or an array of text parts.")
	}
	if mc.Parts == nil {
		return mc.Text, nil
	}
	var b strings.Builder
	for i, part := range mc.Parts {
		if part.Type != "text" || part.Text == nil {
			return "", errInvalid("prediction.content", "invalid_value", "Invalid 'prediction.content[%d]': only parts of type 'text' with a 'text' string are supported.", i)
		}
		b.WriteString(*part.Text)
	}
	return b.String(), nil
}

// setPrediction validates and tokenizes a request's prediction.
func (j *job) setPrediction(raw json.RawMessage) *APIError {
	if !present(raw) {
		return nil
	}
	text, aerr := parsePrediction(raw)
	if aerr != nil {
		return aerr
	}
	toks := j.model.Tokenizer.Encode(text, false)
	if max := j.model.maxDraftTokens(); len(toks) > max {
		toks = toks[:max]
	}
	if j.drafts == nil {
		j.drafts = &jobDrafts{}
	}
	j.drafts.prediction = toks
	return nil
}

func (m *LocalModel) maxDraftTokens() int {
	if m.Drafts != nil && m.Drafts.MaxDraftTokens > 0 {
		return m.Drafts.MaxDraftTokens
	}
	return 8192
}

// HeaderSpeculation: a request with "X-Specgate-Speculation: off" decodes
// plainly (no draft of any source): the baseline of `specgate bench
// workload` against a running server, and an escape hatch.
const HeaderSpeculation = "X-Specgate-Speculation"

// prepareDrafts reads the speculation header and records the cache request
// for the near-miss lookup.
func (s *Server) prepareDrafts(c *fiber.Ctx, j *job, creq *cache.Request) {
	if strings.EqualFold(c.Get(HeaderSpeculation), "off") {
		j.noSpec = true // a prediction is then reported all rejected
		return
	}
	d := j.model.Drafts
	if creq == nil || d == nil || d.NearMissBand <= 0 {
		return
	}
	if _, ok := s.cache.(nearMisser); !ok {
		return
	}
	if j.drafts == nil {
		j.drafts = &jobDrafts{}
	}
	j.drafts.creq = creq
	j.drafts.resolve = func(ctx context.Context) { s.resolveDrafts(ctx, j) }
}

// resolveDrafts looks the near miss up once, right before generation (on
// a cache miss): its answer, tokenized, becomes a draft. A request that
// sent a prediction skips it: the client's draft of this very answer
// leaves little to a similar request's answer, and the lookup (embedding,
// ranking, tokenizing the candidates) cost 0.2-0.25 ms before the first
// token of every code-edit request of bench workload, which drafted from a
// near miss in none of 12 (H100 run) to 3 of 12 requests.
func (s *Server) resolveDrafts(ctx context.Context, j *job) {
	if j.drafts == nil || j.drafts.creq == nil || len(j.drafts.prediction) > 0 {
		return
	}
	j.drafts.once.Do(func() {
		d := j.model.Drafts
		k := d.NearMisses
		if k <= 0 {
			k = 1
		}
		nms, err := s.cache.(nearMisser).NearMisses(ctx, j.drafts.creq, d.NearMissBand, d.NearMissModels, k)
		if err != nil {
			s.log.Warn("cache near-miss lookup failed", "err", err)
			return
		}
		seen := map[string]bool{}
		for _, nm := range nms {
			text := answerText(nm.Response)
			if text == "" || seen[text] {
				continue
			}
			seen[text] = true
			toks := j.model.Tokenizer.Encode(text, false)
			if max := j.model.maxDraftTokens(); len(toks) > max {
				toks = toks[:max]
			}
			j.drafts.nearMiss = append(j.drafts.nearMiss, toks)
		}
		if len(j.drafts.nearMiss) > 0 {
			s.met.nearMiss.WithLabelValues(j.model.Name, nms[0].Reason).Inc()
		}
	})
}

// answerText extracts the first choice's text from a stored response: a
// chat completion (message.content), a text completion (text), or an SSE
// stream of chunks (delta.content / text, concatenated).
func answerText(body []byte) string {
	type choice struct {
		Message *struct {
			Content *string `json:"content"`
		} `json:"message"`
		Delta *struct {
			Content *string `json:"content"`
		} `json:"delta"`
		Text  *string `json:"text"`
		Index int     `json:"index"`
	}
	type resp struct {
		Choices []choice `json:"choices"`
	}
	text := func(r resp, b *strings.Builder) {
		for _, c := range r.Choices {
			if c.Index != 0 {
				continue
			}
			switch {
			case c.Message != nil && c.Message.Content != nil:
				b.WriteString(*c.Message.Content)
			case c.Delta != nil && c.Delta.Content != nil:
				b.WriteString(*c.Delta.Content)
			case c.Text != nil:
				b.WriteString(*c.Text)
			}
		}
	}
	var b strings.Builder
	body = bytes.TrimSpace(body)
	if len(body) > 0 && body[0] == '{' {
		var r resp
		if json.Unmarshal(body, &r) == nil {
			text(r, &b)
		}
		return b.String()
	}
	for _, line := range bytes.Split(body, []byte("\n")) {
		line = bytes.TrimSpace(line)
		data, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue
		}
		var r resp
		if json.Unmarshal(bytes.TrimSpace(data), &r) == nil {
			text(r, &b)
		}
	}
	return b.String()
}

// attachDrafts makes r draft from the model-free sources, if any apply.
func (j *job) attachDrafts(r *engine.GenerateRequest) {
	if j.noSpec {
		r.NoSpeculation = true
		return
	}
	d := j.model.Drafts
	var known []engine.KnownDraft
	if j.drafts != nil {
		if len(j.drafts.prediction) > 0 {
			known = append(known, engine.KnownDraft{Source: speculative.SourcePrediction, Tokens: j.drafts.prediction})
		}
		for _, nm := range j.drafts.nearMiss {
			known = append(known, engine.KnownDraft{Source: speculative.SourceNearMiss, Tokens: nm})
		}
	}
	var ps []engine.Proposer
	if len(known) > 0 {
		var k *speculative.Known
		if d != nil && d.Known != nil {
			k = d.Known
		} else {
			k = modelKnown(j.model)
		}
		ps = append(ps, k)
	}
	if d != nil && d.Suffix != nil {
		ps = append(ps, d.Suffix)
	}
	if len(ps) == 0 {
		return
	}
	if d != nil {
		ps = append(ps, d.Base...)
	}
	speculative.WithProposers(r, ps, j.tenant, known)
}

// predictionUsage fills OpenAI's accepted/rejected prediction token counts
// (summed over choices): accepted are the prediction's tokens that appear
// in the completion, in order (longest common subsequence of the token
// lists; for very long ones, the draft tokens the model accepted in
// verification), rejected the prediction's other tokens.
func predictionUsage(j *job, res []engine.Result, u *Usage) {
	if j.drafts == nil || j.drafts.prediction == nil {
		return
	}
	acc, rej := 0, 0
	for i, r := range res {
		a := 0
		if r.Spec != nil {
			a = min(r.Spec.BySource[speculative.SourcePrediction].Accepted, len(j.drafts.prediction))
		}
		if i < len(j.drafts.out) {
			if n, ok := commonTokens(j.drafts.prediction, j.drafts.out[i]); ok {
				a = n
			}
		}
		acc += a
		rej += len(j.drafts.prediction) - a
	}
	if u.CompletionTokensDetails == nil {
		u.CompletionTokensDetails = &CompletionTokensDetails{}
	}
	u.CompletionTokensDetails.AcceptedPredictionTokens = &acc
	u.CompletionTokensDetails.RejectedPredictionTokens = &rej
}
