package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"time"
)

// Sentinel errors of the gateway. Returned errors wrap one of these with %w.
var (
	ErrConfig        = errors.New("gateway: bad config")
	ErrUnknownModel  = errors.New("gateway: unknown model")
	ErrUpstream      = errors.New("gateway: upstream failed")
	ErrClientGone    = errors.New("gateway: client disconnected")
	ErrShuttingDown  = errors.New("gateway: shutting down")
	ErrInvalidParams = errors.New("gateway: invalid request")
)

// APIError is an error rendered in OpenAI's shape:
//
//	{"error":{"message":..., "type":..., "param":..., "code":...}}
type APIError struct {
	Status     int
	Message    string
	Type       string
	Param      string // "" renders as null
	Code       string // "" renders as null
	RetryAfter time.Duration
}

func (e *APIError) Error() string {
	if e.Param != "" {
		return fmt.Sprintf("%d %s (param %s)", e.Status, e.Message, e.Param)
	}
	return fmt.Sprintf("%d %s", e.Status, e.Message)
}

// Unwrap lets callers test API errors against the sentinels:
// model_not_found wraps ErrUnknownModel, other 400s wrap ErrInvalidParams,
// 502/504 wrap ErrUpstream.
func (e *APIError) Unwrap() error {
	switch {
	case e.Code == "model_not_found":
		return ErrUnknownModel
	case e.Status == 400:
		return ErrInvalidParams
	case e.Status == 502 || e.Status == 504:
		return ErrUpstream
	}
	return nil
}

type errorBody struct {
	Error errorFields `json:"error"`
}

type errorFields struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// MarshalJSON renders the OpenAI error envelope.
func (e *APIError) MarshalJSON() ([]byte, error) {
	f := errorFields{Message: e.Message, Type: e.Type}
	if e.Param != "" {
		p := e.Param
		f.Param = &p
	}
	if e.Code != "" {
		c := e.Code
		f.Code = &c
	}
	return json.Marshal(errorBody{Error: f})
}

func errInvalid(param, code, format string, args ...any) *APIError {
	return &APIError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: param, Code: code, Message: fmt.Sprintf(format, args...)}
}

func errModelNotFound(model string) *APIError {
	return &APIError{Status: http.StatusNotFound, Type: "invalid_request_error", Param: "model", Code: "model_not_found",
		Message: fmt.Sprintf("The model '%s' does not exist or you do not have access to it.", logString(model))}
}

func errUnauthorized(msg string) *APIError {
	return &APIError{Status: http.StatusUnauthorized, Type: "invalid_request_error", Code: "invalid_api_key", Message: msg}
}

func errTooLarge(limit int) *APIError {
	return &APIError{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error", Code: "request_too_large",
		Message: fmt.Sprintf("Request body exceeds the limit of %d bytes.", limit)}
}

func errInternal(msg string) *APIError {
	return &APIError{Status: http.StatusInternalServerError, Type: "server_error", Message: msg}
}

func errUnavailable(msg string, retry time.Duration) *APIError {
	return &APIError{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "service_unavailable", Message: msg, RetryAfter: retry}
}

// decodeJSON strictly decodes a request body into v. A syntax error or a
// field of the wrong JSON type becomes a 400 naming the field.
func decodeJSON(body []byte, v any) *APIError {
	if len(bytes.TrimSpace(body)) == 0 {
		return errInvalid("", "invalid_json", "We could not parse the JSON body of your request: the body is empty. The API expects a JSON payload.")
	}
	err := json.Unmarshal(body, v)
	if err == nil {
		return nil
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		param := indexedParam(body, te.Field)
		return errInvalid(param, "invalid_type", "Invalid type for '%s': expected %s, but got %s.", param, describeType(te.Type), article(te.Value))
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return errInvalid("", "invalid_json", "We could not parse the JSON body of your request: %s at byte offset %d. The API expects a JSON payload.", se.Error(), se.Offset)
	}
	return errInvalid("", "invalid_json", "We could not parse the JSON body of your request: %s. The API expects a JSON payload.", err.Error())
}

func describeType(t reflect.Type) string {
	if t == nil {
		return "a value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t {
	case reflect.TypeOf(StopList{}), reflect.TypeOf(MessageContent{}), reflect.TypeOf(Prompt{}):
		return "a string or an array"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return "a " + t.Kind().String()
}

func article(kind string) string {
	switch kind {
	case "array", "object", "integer":
		return "an " + kind
	case "number -1", "number":
		return "a number"
	}
	if strings.HasPrefix(kind, "number") {
		return "a number (" + strings.TrimPrefix(kind, "number ") + ")"
	}
	return "a " + kind
}

// indexedParam turns encoding/json's "messages.content" into OpenAI's
// "messages[2].content" by finding the first element of the top-level array
// that fails to decode on its own. Other paths are returned unchanged.
func indexedParam(body []byte, field string) string {
	top, rest, ok := strings.Cut(field, ".")
	if !ok || top != "messages" {
		return field
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(body, &obj) != nil {
		return field
	}
	var elems []json.RawMessage
	if json.Unmarshal(obj[top], &elems) != nil {
		return field
	}
	for i, e := range elems {
		var m ChatMessage
		if json.Unmarshal(e, &m) != nil {
			return fmt.Sprintf("%s[%d].%s", top, i, rest)
		}
	}
	return field
}
