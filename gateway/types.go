package gateway

import (
	"bytes"
	"encoding/json"
	"reflect"
)

// Request types use pointers for every optional scalar so that an absent
// field is told apart from its zero value: temperature 0 (greedy) must not be
// confused with "not given" (default 1). Fields that a local model cannot
// honour are kept as raw JSON so that their presence can be detected and
// reported by name.

// ChatCompletionRequest is the body of POST /v1/chat/completions.
type ChatCompletionRequest struct {
	Model               string          `json:"model"`
	Messages            []ChatMessage   `json:"messages"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	N                   *int            `json:"n"`
	Stream              *bool           `json:"stream"`
	StreamOptions       *StreamOptions  `json:"stream_options"`
	Stop                *StopList       `json:"stop"`
	PresencePenalty     *float64        `json:"presence_penalty"`
	FrequencyPenalty    *float64        `json:"frequency_penalty"`
	Logprobs            *bool           `json:"logprobs"`
	TopLogprobs         *int            `json:"top_logprobs"`
	Seed                *int64          `json:"seed"`
	User                *string         `json:"user"`
	ResponseFormat      *ResponseFormat `json:"response_format"`

	// Valid OpenAI fields that local models reject when present (non-null).
	Tools             json.RawMessage `json:"tools"`
	ToolChoice        json.RawMessage `json:"tool_choice"`
	ParallelToolCalls json.RawMessage `json:"parallel_tool_calls"`
	Functions         json.RawMessage `json:"functions"`
	FunctionCall      json.RawMessage `json:"function_call"`
	LogitBias         json.RawMessage `json:"logit_bias"`
	Modalities        json.RawMessage `json:"modalities"`
	Audio             json.RawMessage `json:"audio"`
	Prediction        json.RawMessage `json:"prediction"`
	ReasoningEffort   json.RawMessage `json:"reasoning_effort"`
	WebSearchOptions  json.RawMessage `json:"web_search_options"`
}

// StreamOptions is stream_options.
type StreamOptions struct {
	IncludeUsage *bool `json:"include_usage"`
}

// ResponseFormat is response_format. Only {"type":"text"} is honoured locally.
type ResponseFormat struct {
	Type       string          `json:"type"`
	JSONSchema json.RawMessage `json:"json_schema,omitempty"`
}

// ChatMessage is one message of a chat request.
type ChatMessage struct {
	Role       string          `json:"role"`
	Content    MessageContent  `json:"content"`
	Name       *string         `json:"name"`
	ToolCalls  json.RawMessage `json:"tool_calls"`
	ToolCallID *string         `json:"tool_call_id"`
}

// UnmarshalJSON decodes a message, noting a missing content field (which
// MessageContent's own decoder never sees).
func (m *ChatMessage) UnmarshalJSON(b []byte) error {
	type plain ChatMessage
	p := plain{Content: MessageContent{absent: true}}
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*m = ChatMessage(p)
	return nil
}

// MessageContent is a message's content: a string, an array of content
// parts, or null. Parts keeps the parts as sent (nil for a string).
type MessageContent struct {
	Text  string
	Parts []ContentPart
	Null  bool
	// absent is set when a decoded message had no content field at all
	// (ChatMessage.UnmarshalJSON); such a message is a 400.
	absent bool
}

// ContentPart is one element of an array content.
type ContentPart struct {
	Type string  `json:"type"`
	Text *string `json:"text"`
	// raw is a part other than text as sent (images, audio, files: the
	// cache key includes it, normalize.go); nil for text parts.
	raw json.RawMessage
}

// UnmarshalJSON decodes a part, keeping parts other than text as sent.
func (p *ContentPart) UnmarshalJSON(b []byte) error {
	type plain ContentPart
	var q plain
	if err := json.Unmarshal(b, &q); err != nil {
		return err
	}
	*p = ContentPart(q)
	if p.Type != "text" {
		p.raw = append(json.RawMessage(nil), b...)
	}
	return nil
}

// UnmarshalJSON accepts a string, null, or an array of parts.
func (m *MessageContent) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case bytes.Equal(b, []byte("null")):
		*m = MessageContent{Null: true}
		return nil
	case len(b) > 0 && b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*m = MessageContent{Text: s}
		return nil
	case len(b) > 0 && b[0] == '[':
		var parts []ContentPart
		if err := json.Unmarshal(b, &parts); err != nil {
			return err
		}
		*m = MessageContent{Parts: parts}
		return nil
	}
	return &json.UnmarshalTypeError{Value: jsonKind(b), Type: reflect.TypeOf(MessageContent{})}
}

// MarshalJSON writes the content back as a string, parts, or null.
func (m MessageContent) MarshalJSON() ([]byte, error) {
	switch {
	case m.Null:
		return []byte("null"), nil
	case m.Parts != nil:
		return json.Marshal(m.Parts)
	}
	return json.Marshal(m.Text)
}

// StopList is stop: a string or a list of strings.
type StopList []string

// UnmarshalJSON accepts null, a string, or an array of strings.
func (s *StopList) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if bytes.Equal(b, []byte("null")) {
		*s = nil
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var one string
		if err := json.Unmarshal(b, &one); err != nil {
			return err
		}
		*s = StopList{one}
		return nil
	}
	if len(b) > 0 && b[0] == '[' {
		var list []string
		if err := json.Unmarshal(b, &list); err != nil {
			return err
		}
		*s = list
		return nil
	}
	return &json.UnmarshalTypeError{Value: jsonKind(b), Type: reflect.TypeOf(StopList{})}
}

// CompletionRequest is the body of POST /v1/completions.
type CompletionRequest struct {
	Model            string          `json:"model"`
	Prompt           *Prompt         `json:"prompt"`
	MaxTokens        *int            `json:"max_tokens"`
	Temperature      *float64        `json:"temperature"`
	TopP             *float64        `json:"top_p"`
	N                *int            `json:"n"`
	Stream           *bool           `json:"stream"`
	StreamOptions    *StreamOptions  `json:"stream_options"`
	Stop             *StopList       `json:"stop"`
	PresencePenalty  *float64        `json:"presence_penalty"`
	FrequencyPenalty *float64        `json:"frequency_penalty"`
	Logprobs         *int            `json:"logprobs"`
	Echo             *bool           `json:"echo"`
	Seed             *int64          `json:"seed"`
	User             *string         `json:"user"`
	BestOf           *int            `json:"best_of"`
	Suffix           *string         `json:"suffix"`
	LogitBias        json.RawMessage `json:"logit_bias"`
	// Prediction is OpenAI's Predicted Outputs field (chat only at OpenAI;
	// accepted here too): a draft of the expected output.
	Prediction json.RawMessage `json:"prediction"`
}

// Prompt is a completion prompt: a string, a list of strings, a list of
// token ids, or a list of token-id lists. Exactly one of Texts and Tokens is
// set after decoding.
type Prompt struct {
	Texts  []string
	Tokens [][]int32
}

// UnmarshalJSON accepts the four OpenAI prompt forms.
func (p *Prompt) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*p = Prompt{Texts: []string{s}}
		return nil
	}
	if len(b) == 0 || b[0] != '[' {
		return &json.UnmarshalTypeError{Value: jsonKind(b), Type: reflect.TypeOf(Prompt{})}
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	if len(raw) == 0 {
		*p = Prompt{Texts: []string{}}
		return nil
	}
	first := bytes.TrimSpace(raw[0])
	switch {
	case len(first) > 0 && first[0] == '"':
		var ss []string
		if err := json.Unmarshal(b, &ss); err != nil {
			return err
		}
		*p = Prompt{Texts: ss}
	case len(first) > 0 && first[0] == '[':
		var tt [][]int32
		if err := json.Unmarshal(b, &tt); err != nil {
			return err
		}
		*p = Prompt{Tokens: tt}
	default:
		var t []int32
		if err := json.Unmarshal(b, &t); err != nil {
			return err
		}
		*p = Prompt{Tokens: [][]int32{t}}
	}
	return nil
}

// EmbeddingRequest is the body of POST /v1/embeddings.
type EmbeddingRequest struct {
	Model          string  `json:"model"`
	Input          *Prompt `json:"input"`
	EncodingFormat *string `json:"encoding_format"`
	Dimensions     *int    `json:"dimensions"`
	User           *string `json:"user"`
}

// Usage is the OpenAI usage object plus specgate's speculative extension.
type Usage struct {
	PromptTokens            int                      `json:"prompt_tokens"`
	CompletionTokens        int                      `json:"completion_tokens"`
	TotalTokens             int                      `json:"total_tokens"`
	PromptTokensDetails     *PromptTokensDetails     `json:"prompt_tokens_details,omitempty"`
	CompletionTokensDetails *CompletionTokensDetails `json:"completion_tokens_details,omitempty"`
	Speculative             *SpeculativeUsage        `json:"speculative,omitempty"`
}

// PromptTokensDetails reports prefix-cache reuse.
type PromptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// CompletionTokensDetails mirrors OpenAI's breakdown (always zero reasoning).
type CompletionTokensDetails struct {
	ReasoningTokens int `json:"reasoning_tokens"`
	// Set when the request had a `prediction`, as OpenAI reports them:
	// completion tokens that came from the prediction, and prediction
	// tokens that did not appear in the completion.
	AcceptedPredictionTokens *int `json:"accepted_prediction_tokens,omitempty"`
	RejectedPredictionTokens *int `json:"rejected_prediction_tokens,omitempty"`
}

// SpeculativeUsage is the per-request speculation report (extension field
// usage.speculative).
type SpeculativeUsage struct {
	Steps              int     `json:"steps"`
	Proposed           int     `json:"proposed"`
	Accepted           int     `json:"accepted"`
	MeanAcceptedLength float64 `json:"mean_accepted_length"`
	AcceptanceRate     float64 `json:"acceptance_rate"`
	// Exact is false when an approximate acceptance rule (Medusa's typical
	// acceptance) decided sampled tokens: the output is then not exactly
	// the model's distribution.
	Exact bool `json:"exact"`
	// BySource splits proposed and accepted draft tokens by draft source
	// (draft, medusa, suffix, prediction, near_miss, ...).
	BySource map[string]SpeculativeSource `json:"by_source,omitempty"`
	// Forwards is engine.SpecStats.Forwards: the target's decode forwards
	// of the request, and DecodeTokens its choices' completion tokens
	// after each one's first (the prefill's): specgate_spec_tokens_per_step.
	// Not in the API.
	Forwards     int `json:"-"`
	DecodeTokens int `json:"-"`
}

// SpeculativeSource is one draft source's share of a request's speculation.
type SpeculativeSource struct {
	Proposed int `json:"proposed"`
	Accepted int `json:"accepted"`
}

// ChatCompletion is a non-streaming chat response.
type ChatCompletion struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	SystemFingerprint string       `json:"system_fingerprint"`
	Choices           []ChatChoice `json:"choices"`
	Usage             *Usage       `json:"usage"`
}

// ChatChoice is one choice of a chat response.
type ChatChoice struct {
	Index        int           `json:"index"`
	Message      AssistantMsg  `json:"message"`
	Logprobs     *ChatLogprobs `json:"logprobs"`
	FinishReason string        `json:"finish_reason"`
}

// AssistantMsg is the generated message.
type AssistantMsg struct {
	Role    string  `json:"role"`
	Content string  `json:"content"`
	Refusal *string `json:"refusal"`
}

// ChatLogprobs is choices[].logprobs of a chat response.
type ChatLogprobs struct {
	Content []ChatTokenLogprob `json:"content"`
	Refusal []ChatTokenLogprob `json:"refusal"`
}

// ChatTokenLogprob is one token with its alternatives.
type ChatTokenLogprob struct {
	Token       string       `json:"token"`
	Logprob     float64      `json:"logprob"`
	Bytes       []int        `json:"bytes"`
	TopLogprobs []TopLogprob `json:"top_logprobs"`
}

// TopLogprob is one alternative token.
type TopLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// ChatCompletionChunk is one streamed chat event.
type ChatCompletionChunk struct {
	ID                string            `json:"id"`
	Object            string            `json:"object"`
	Created           int64             `json:"created"`
	Model             string            `json:"model"`
	SystemFingerprint string            `json:"system_fingerprint"`
	Choices           []ChatChunkChoice `json:"choices"`
	// Usage is present (null or set) only with stream_options.include_usage.
	Usage json.RawMessage `json:"usage,omitempty"`
}

// ChatChunkChoice is one choice's delta.
type ChatChunkChoice struct {
	Index        int           `json:"index"`
	Delta        ChatDelta     `json:"delta"`
	Logprobs     *ChatLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
}

// ChatDelta is the incremental message.
type ChatDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

// Completion is a /v1/completions response or stream chunk.
type Completion struct {
	ID                string             `json:"id"`
	Object            string             `json:"object"`
	Created           int64              `json:"created"`
	Model             string             `json:"model"`
	SystemFingerprint string             `json:"system_fingerprint"`
	Choices           []CompletionChoice `json:"choices"`
	Usage             json.RawMessage    `json:"usage,omitempty"`
}

// CompletionChoice is one choice of a completion.
type CompletionChoice struct {
	Text         string              `json:"text"`
	Index        int                 `json:"index"`
	Logprobs     *CompletionLogprobs `json:"logprobs"`
	FinishReason *string             `json:"finish_reason"`
}

// CompletionLogprobs is the legacy completions logprobs object.
type CompletionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float64            `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

// Model is one entry of /v1/models.
type Model struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// ModelList is the /v1/models response.
type ModelList struct {
	Object string  `json:"object"`
	Data   []Model `json:"data"`
}

// Embedding is one vector of an embeddings response. Embedding holds
// []float32 or a base64 string.
type Embedding struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"`
}

// EmbeddingResponse is the /v1/embeddings response.
type EmbeddingResponse struct {
	Object string      `json:"object"`
	Data   []Embedding `json:"data"`
	Model  string      `json:"model"`
	Usage  Usage       `json:"usage"`
}

// jsonKind names the JSON type of a raw value for error messages.
func jsonKind(b []byte) string {
	if len(b) == 0 {
		return "empty"
	}
	switch b[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}

// present reports whether a raw optional field was sent with a non-null value.
func present(r json.RawMessage) bool {
	r = bytes.TrimSpace(r)
	return len(r) > 0 && !bytes.Equal(r, []byte("null"))
}
