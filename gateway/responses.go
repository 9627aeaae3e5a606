package gateway

// POST /v1/responses (OpenAI's Responses API, text in and out) and
// GET /v1/responses/{id}. A request is translated into a chat completion
// and run through handleChat on a second request context, so that local
// models and upstreams, the semantic cache, single-flight, limits and
// metrics all apply unchanged; the chat answer (JSON or SSE) is translated
// back into a Response object or the Responses streaming events.
// previous_response_id continues a conversation stored in this process
// (bounded, per tenant; lost on restart).

import (
	"bufio"
	"bytes"
	"container/list"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"
)

// ResponsesRequest is the body of POST /v1/responses (the fields specgate
// serves; tools, non-text formats and background runs are refused by name).
type ResponsesRequest struct {
	Model              string          `json:"model"`
	Input              json.RawMessage `json:"input"`
	Instructions       *string         `json:"instructions"`
	MaxOutputTokens    *int            `json:"max_output_tokens"`
	Temperature        *float64        `json:"temperature"`
	TopP               *float64        `json:"top_p"`
	Stream             *bool           `json:"stream"`
	PreviousResponseID *string         `json:"previous_response_id"`
	Store              *bool           `json:"store"`
	Metadata           json.RawMessage `json:"metadata"`
	User               *string         `json:"user"`
	Text               *struct {
		Format *struct {
			Type string `json:"type"`
		} `json:"format"`
	} `json:"text"`
	Tools      json.RawMessage `json:"tools"`
	ToolChoice json.RawMessage `json:"tool_choice"`
	Background *bool           `json:"background"`
	Reasoning  json.RawMessage `json:"reasoning"`
	Truncation *string         `json:"truncation"`
}

// Response is a Responses API response object.
type Response struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	CreatedAt          int64             `json:"created_at"`
	Status             string            `json:"status"` // completed | incomplete | in_progress | failed
	Error              *ResponseError    `json:"error"`
	IncompleteDetails  *IncompleteReason `json:"incomplete_details"`
	Instructions       *string           `json:"instructions"`
	MaxOutputTokens    *int              `json:"max_output_tokens"`
	Model              string            `json:"model"`
	Output             []ResponseItem    `json:"output"`
	ParallelToolCalls  bool              `json:"parallel_tool_calls"`
	PreviousResponseID *string           `json:"previous_response_id"`
	Reasoning          map[string]any    `json:"reasoning"`
	Store              bool              `json:"store"`
	Temperature        float64           `json:"temperature"`
	Text               map[string]any    `json:"text"`
	ToolChoice         string            `json:"tool_choice"`
	Tools              []any             `json:"tools"`
	TopP               float64           `json:"top_p"`
	Truncation         string            `json:"truncation"`
	Usage              *ResponseUsage    `json:"usage"`
	User               *string           `json:"user"`
	Metadata           json.RawMessage   `json:"metadata"`
}

// ResponseError is response.error of a failed response.
type ResponseError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// IncompleteReason is response.incomplete_details.
type IncompleteReason struct {
	Reason string `json:"reason"`
}

// ResponseItem is one output item: an assistant message.
type ResponseItem struct {
	Type    string         `json:"type"`
	ID      string         `json:"id"`
	Status  string         `json:"status"`
	Role    string         `json:"role"`
	Content []ResponsePart `json:"content"`
}

// ResponsePart is one content part of an output message.
type ResponsePart struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
}

// ResponseUsage is response.usage.
type ResponseUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

// Limits of the in-process response store.
const (
	responseStoreEntries = 10000
	responseStoreBytes   = 64 << 20
)

// responseStore keeps stored responses and their conversations for
// previous_response_id and GET /v1/responses/{id}: least recently used out
// beyond responseStoreEntries entries or responseStoreBytes of text.
type responseStore struct {
	mu    sync.Mutex
	byID  map[string]*list.Element
	order *list.List // front = most recent
	bytes int
}

type storedResponse struct {
	id, tenant string
	convo      []ChatMessage // input and output of the chain, without instructions
	resp       []byte        // the Response JSON
	size       int
}

func newResponseStore() *responseStore {
	return &responseStore{byID: map[string]*list.Element{}, order: list.New()}
}

func (st *responseStore) put(e *storedResponse) {
	e.size = len(e.resp)
	for _, m := range e.convo {
		e.size += len(m.Content.Text) + 32
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if old, ok := st.byID[e.id]; ok {
		st.bytes -= old.Value.(*storedResponse).size
		st.order.Remove(old)
	}
	st.byID[e.id] = st.order.PushFront(e)
	st.bytes += e.size
	for st.order.Len() > responseStoreEntries || (st.bytes > responseStoreBytes && st.order.Len() > 1) {
		last := st.order.Back()
		v := last.Value.(*storedResponse)
		st.order.Remove(last)
		delete(st.byID, v.id)
		st.bytes -= v.size
	}
}

func (st *responseStore) get(id, tenant string) (*storedResponse, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	el, ok := st.byID[id]
	if !ok || el.Value.(*storedResponse).tenant != tenant {
		return nil, false
	}
	st.order.MoveToFront(el)
	return el.Value.(*storedResponse), true
}

func (s *Server) responses() *responseStore {
	s.respOnce.Do(func() { s.respStore = newResponseStore() })
	return s.respStore
}

func newResponseID(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// responseInput turns input (a string or a list of message items) into chat
// messages.
func responseInput(raw json.RawMessage) ([]ChatMessage, *APIError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, errInvalid("input", "missing_required_parameter", "Missing required parameter: 'input'.")
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, errInvalid("input", "invalid_type", "Invalid 'input': %v.", err)
		}
		return []ChatMessage{{Role: "user", Content: MessageContent{Text: s}}}, nil
	}
	if raw[0] != '[' {
		return nil, errInvalid("input", "invalid_type", "Invalid type for 'input': expected a string or an array of input items.")
	}
	var items []struct {
		Type    string          `json:"type"`
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, errInvalid("input", "invalid_type", "Invalid 'input': %v.", err)
	}
	if len(items) == 0 {
		return nil, errInvalid("input", "invalid_value", "Invalid 'input': empty array.")
	}
	out := make([]ChatMessage, 0, len(items))
	for i, it := range items {
		param := fmt.Sprintf("input[%d]", i)
		if it.Type != "" && it.Type != "message" {
			return nil, errInvalid(param+".type", "unsupported_parameter", "Input items of type '%s' are not supported; send messages with text content.", it.Type)
		}
		role := it.Role
		switch role {
		case "user", "assistant", "system":
		case "developer":
			role = "system"
		default:
			return nil, errInvalid(param+".role", "invalid_value", "Invalid value for '%s.role': '%s'. Supported values are: 'user', 'assistant', 'system' and 'developer'.", param, it.Role)
		}
		text, aerr := responseContentText(it.Content, param+".content")
		if aerr != nil {
			return nil, aerr
		}
		out = append(out, ChatMessage{Role: role, Content: MessageContent{Text: text}})
	}
	return out, nil
}

func responseContentText(raw json.RawMessage, param string) (string, *APIError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", errInvalid(param, "invalid_type", "Invalid '%s': %v.", param, err)
		}
		return s, nil
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if len(raw) == 0 || raw[0] != '[' || json.Unmarshal(raw, &parts) != nil {
		return "", errInvalid(param, "invalid_type", "Invalid type for '%s': expected a string or an array of content parts.", param)
	}
	var b strings.Builder
	for j, p := range parts {
		switch p.Type {
		case "input_text", "output_text", "text":
			if p.Text == nil {
				return "", errInvalid(fmt.Sprintf("%s[%d].text", param, j), "missing_required_parameter", "Missing required parameter: '%s[%d].text'.", param, j)
			}
			b.WriteString(*p.Text)
		default:
			return "", errInvalid(fmt.Sprintf("%s[%d].type", param, j), "unsupported_parameter", "Content parts of type '%s' are not supported; send input_text.", p.Type)
		}
	}
	return b.String(), nil
}

// chatFromResponses validates a Responses request and builds the chat
// completion request that serves it, plus the conversation so far (for
// storing) and the template of the Response object.
func (s *Server) chatFromResponses(r *ResponsesRequest, tenant string) (*ChatCompletionRequest, []ChatMessage, *Response, *APIError) {
	if r.Model == "" {
		return nil, nil, nil, errInvalid("model", "missing_required_parameter", "you must provide a model parameter")
	}
	if len(bytes.TrimSpace(r.Tools)) > 0 && string(bytes.TrimSpace(r.Tools)) != "null" && string(bytes.TrimSpace(r.Tools)) != "[]" {
		return nil, nil, nil, errInvalid("tools", "unsupported_parameter", "Tools are not supported by the Responses endpoint of this server; use /v1/chat/completions with an upstream model.")
	}
	if r.Text != nil && r.Text.Format != nil && r.Text.Format.Type != "text" {
		return nil, nil, nil, errInvalid("text.format.type", "unsupported_parameter", "Only text.format.type 'text' is supported, got '%s'.", r.Text.Format.Type)
	}
	if r.Background != nil && *r.Background {
		return nil, nil, nil, errInvalid("background", "unsupported_parameter", "Background responses are not supported.")
	}
	if r.MaxOutputTokens != nil && *r.MaxOutputTokens < 1 {
		return nil, nil, nil, errInvalid("max_output_tokens", "invalid_value", "Invalid 'max_output_tokens': must be at least 1, got %d.", *r.MaxOutputTokens)
	}
	input, aerr := responseInput(r.Input)
	if aerr != nil {
		return nil, nil, nil, aerr
	}
	var convo []ChatMessage
	if r.PreviousResponseID != nil && *r.PreviousResponseID != "" {
		prev, ok := s.responses().get(*r.PreviousResponseID, tenant)
		if !ok {
			return nil, nil, nil, &APIError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: "previous_response_id", Code: "previous_response_not_found",
				Message: fmt.Sprintf("Previous response with id '%s' not found.", *r.PreviousResponseID)}
		}
		convo = append(convo, prev.convo...)
	}
	convo = append(convo, input...)
	msgs := make([]ChatMessage, 0, len(convo)+1)
	if r.Instructions != nil && *r.Instructions != "" {
		msgs = append(msgs, ChatMessage{Role: "system", Content: MessageContent{Text: *r.Instructions}})
	}
	msgs = append(msgs, convo...)
	stream := r.Stream != nil && *r.Stream
	yes := true
	chat := &ChatCompletionRequest{Model: r.Model, Messages: msgs, MaxTokens: r.MaxOutputTokens, Temperature: r.Temperature,
		TopP: r.TopP, User: r.User}
	if stream {
		chat.Stream = &yes
		chat.StreamOptions = &StreamOptions{IncludeUsage: &yes}
	}
	store := r.Store == nil || *r.Store
	tmpl := &Response{ID: newResponseID("resp_"), Object: "response", CreatedAt: time.Now().Unix(), Status: "in_progress",
		Instructions: r.Instructions, MaxOutputTokens: r.MaxOutputTokens, Model: r.Model, Output: []ResponseItem{},
		ParallelToolCalls: true, PreviousResponseID: r.PreviousResponseID, Reasoning: map[string]any{"effort": nil, "summary": nil},
		Store: store, Temperature: 1, Text: map[string]any{"format": map[string]any{"type": "text"}}, ToolChoice: "auto",
		Tools: []any{}, TopP: 1, Truncation: "disabled", User: r.User, Metadata: r.Metadata}
	if r.Temperature != nil {
		tmpl.Temperature = *r.Temperature
	}
	if r.TopP != nil {
		tmpl.TopP = *r.TopP
	}
	if len(bytes.TrimSpace(tmpl.Metadata)) == 0 || string(bytes.TrimSpace(tmpl.Metadata)) == "null" {
		tmpl.Metadata = json.RawMessage("{}")
	}
	return chat, convo, tmpl, nil
}

func (s *Server) handleResponses(c *fiber.Ctx) error {
	var req ResponsesRequest
	if err := decodeJSON(c.Body(), &req); err != nil {
		return err
	}
	c.Locals(localModel, req.Model)
	tenant := tenantOf(c)
	chat, convo, resp, aerr := s.chatFromResponses(&req, tenant)
	if aerr != nil {
		return aerr
	}
	body, err := json.Marshal(chat)
	if err != nil {
		return errInternal(err.Error())
	}
	inner, release := s.innerChatContext(c, body)
	defer release()
	if err := s.handleChat(inner); err != nil {
		return err
	}
	ir := &inner.Context().Response
	// Cache and rate-limit headers of the chat answer carry over.
	ir.Header.VisitAll(func(k, v []byte) {
		switch strings.ToLower(string(k)) {
		case "content-type", "content-length", "connection", "transfer-encoding", "date", "server", "cache-control", "x-accel-buffering":
		default:
			c.Response().Header.SetBytesKV(k, v)
		}
	})
	if st := ir.StatusCode(); st != http.StatusOK {
		// An upstream's error answer: pass it on as it came.
		c.Status(st)
		c.Set(fiber.HeaderContentType, string(ir.Header.ContentType()))
		return c.Send(append([]byte(nil), ir.Body()...))
	}
	finish := func(r *Response, text string) {
		if !r.Store || r.Status == "failed" {
			return
		}
		b, _ := json.Marshal(r)
		full := append(append([]ChatMessage(nil), convo...), ChatMessage{Role: "assistant", Content: MessageContent{Text: text}})
		s.responses().put(&storedResponse{id: r.ID, tenant: tenant, convo: full, resp: b})
	}
	if chat.Stream == nil {
		var cc ChatCompletion
		if err := json.Unmarshal(ir.Body(), &cc); err != nil || len(cc.Choices) == 0 {
			return errInternal("the chat answer could not be read as a chat completion")
		}
		ch := cc.Choices[0]
		completeResponse(resp, newResponseID("msg_"), ch.Message.Content, ch.FinishReason, cc.Usage)
		finish(resp, ch.Message.Content)
		return c.JSON(resp)
	}
	var src io.Reader
	closeSrc := func() {}
	if ir.IsBodyStream() {
		src = ir.BodyStream()
		closeSrc = func() { _ = ir.CloseBodyStream() }
	} else {
		src = bytes.NewReader(append([]byte(nil), ir.Body()...)) // a cache hit replayed as one body
	}
	setSSEHeaders(c)
	c.Context().SetBodyStreamWriter(func(w *bufio.Writer) {
		defer closeSrc()
		ev := &responseEvents{w: w, resp: resp, itemID: newResponseID("msg_")}
		text, ok := ev.translate(src)
		if ok {
			finish(resp, text)
		}
	})
	return nil
}

// completeResponse fills resp from a finished chat answer.
func completeResponse(resp *Response, itemID, text, finish string, u *Usage) {
	resp.Status = "completed"
	itemStatus := "completed"
	if finish == "length" {
		resp.Status, itemStatus = "incomplete", "incomplete"
		resp.IncompleteDetails = &IncompleteReason{Reason: "max_output_tokens"}
	}
	resp.Output = []ResponseItem{{Type: "message", ID: itemID, Status: itemStatus, Role: "assistant",
		Content: []ResponsePart{{Type: "output_text", Text: text, Annotations: []any{}}}}}
	if u != nil {
		ru := &ResponseUsage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens, TotalTokens: u.TotalTokens}
		if u.PromptTokensDetails != nil {
			ru.InputTokensDetails.CachedTokens = u.PromptTokensDetails.CachedTokens
		}
		resp.Usage = ru
	}
}

// responseEvents writes the Responses streaming events.
type responseEvents struct {
	w      *bufio.Writer
	resp   *Response
	itemID string
	seq    int
	failed bool
}

func (e *responseEvents) emit(typ string, fields map[string]any) {
	if e.failed {
		return
	}
	fields["type"] = typ
	fields["sequence_number"] = e.seq
	e.seq++
	b, _ := json.Marshal(fields)
	fmt.Fprintf(e.w, "event: %s\ndata: %s\n\n", typ, b)
	if err := e.w.Flush(); err != nil {
		e.failed = true
	}
}

// translate reads a chat completion SSE stream from src and writes the
// Responses events; it returns the full text and whether the response
// completed (false when the client left or the chat stream failed).
func (e *responseEvents) translate(src io.Reader) (string, bool) {
	e.emit("response.created", map[string]any{"response": *e.resp})
	e.emit("response.in_progress", map[string]any{"response": *e.resp})
	item := ResponseItem{Type: "message", ID: e.itemID, Status: "in_progress", Role: "assistant", Content: []ResponsePart{}}
	e.emit("response.output_item.added", map[string]any{"output_index": 0, "item": item})
	e.emit("response.content_part.added", map[string]any{"item_id": e.itemID, "output_index": 0, "content_index": 0,
		"part": ResponsePart{Type: "output_text", Text: "", Annotations: []any{}}})
	var text strings.Builder
	var usage *Usage
	finish := ""
	sc := bufio.NewScanner(src)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() && !e.failed {
		line := sc.Bytes()
		data, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok || bytes.Equal(data, []byte("[DONE]")) {
			continue
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage *Usage          `json:"usage"`
			Error json.RawMessage `json:"error"`
		}
		if json.Unmarshal(data, &chunk) != nil {
			continue
		}
		if len(chunk.Error) > 0 && string(chunk.Error) != "null" {
			var ae struct {
				Message string `json:"message"`
				Code    string `json:"code"`
				Type    string `json:"type"`
			}
			_ = json.Unmarshal(chunk.Error, &ae)
			code := ae.Code
			if code == "" {
				code = "server_error"
			}
			e.resp.Status = "failed"
			e.resp.Error = &ResponseError{Code: code, Message: ae.Message}
			e.emit("response.failed", map[string]any{"response": *e.resp})
			return text.String(), false
		}
		if chunk.Usage != nil {
			usage = chunk.Usage
		}
		for _, ch := range chunk.Choices {
			if ch.Delta.Content != "" {
				text.WriteString(ch.Delta.Content)
				e.emit("response.output_text.delta", map[string]any{"item_id": e.itemID, "output_index": 0, "content_index": 0,
					"delta": ch.Delta.Content, "logprobs": []any{}})
			}
			if ch.FinishReason != nil {
				finish = *ch.FinishReason
			}
		}
	}
	if e.failed || finish == "" {
		// The client left, or the chat stream ended without finishing.
		return text.String(), false
	}
	full := text.String()
	part := ResponsePart{Type: "output_text", Text: full, Annotations: []any{}}
	e.emit("response.output_text.done", map[string]any{"item_id": e.itemID, "output_index": 0, "content_index": 0, "text": full, "logprobs": []any{}})
	e.emit("response.content_part.done", map[string]any{"item_id": e.itemID, "output_index": 0, "content_index": 0, "part": part})
	completeResponse(e.resp, e.itemID, full, finish, usage)
	e.emit("response.output_item.done", map[string]any{"output_index": 0, "item": e.resp.Output[0]})
	typ := "response.completed"
	if e.resp.Status == "incomplete" {
		typ = "response.incomplete"
	}
	e.emit(typ, map[string]any{"response": *e.resp})
	return full, !e.failed
}

// innerChatContext builds a request context for POST /v1/chat/completions
// with body, sharing c's connection (for the hang-up watch) and its locals
// (tenant, key, request id). release returns it.
func (s *Server) innerChatContext(c *fiber.Ctx, body []byte) (*fiber.Ctx, func()) {
	fctx := &fasthttp.RequestCtx{}
	fctx.Init2(c.Context().Conn(), nopLogger{}, false)
	c.Request().Header.CopyTo(&fctx.Request.Header)
	fctx.Request.Header.SetMethod(fiber.MethodPost)
	fctx.Request.SetRequestURI("/v1/chat/completions")
	fctx.Request.Header.SetContentType(fiber.MIMEApplicationJSON)
	fctx.Request.Header.Del(fiber.HeaderContentEncoding)
	fctx.Request.SetBody(body)
	c.Context().VisitUserValues(func(k []byte, v any) { fctx.SetUserValueBytes(k, v) })
	inner := s.app.AcquireCtx(fctx)
	return inner, func() { s.app.ReleaseCtx(inner) }
}

// handleGetResponse serves GET /v1/responses/{id} from the store.
func (s *Server) handleGetResponse(c *fiber.Ctx) error {
	id := c.Params("id")
	e, ok := s.responses().get(id, tenantOf(c))
	if !ok {
		return &APIError{Status: http.StatusNotFound, Type: "invalid_request_error", Param: "response_id", Code: "not_found",
			Message: fmt.Sprintf("Response with id '%s' not found.", id)}
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(e.resp)
}

type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}
