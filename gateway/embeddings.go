package gateway

import (
	"strings"

	"github.com/gofiber/fiber/v2"
)

// handleEmbeddings serves /v1/embeddings from a local embedder or an upstream.
func (s *Server) handleEmbeddings(c *fiber.Ctx) error {
	body := c.Body()
	var head modelOnly
	if err := decodeJSON(body, &head); err != nil {
		return err
	}
	c.Locals(localModel, head.Model)
	if ur, ok := s.ups[head.Model]; ok {
		return s.proxy(c, ur, "/embeddings", body, false, nil)
	}
	emb, ok := s.embed[head.Model]
	if !ok {
		if _, local := s.local[head.Model]; local {
			return errInvalid("model", "model_not_supported", "Model '%s' does not serve embeddings; use one of the embedding models listed by /v1/models.", head.Model)
		}
		if head.Model == "" {
			return errInvalid("model", "missing_required_parameter", "you must provide a model parameter")
		}
		return errModelNotFound(head.Model)
	}
	var req EmbeddingRequest
	if err := decodeJSON(body, &req); err != nil {
		return err
	}
	if req.Input == nil {
		return errInvalid("input", "missing_required_parameter", "Missing required parameter: 'input'.")
	}
	if req.Input.Tokens != nil {
		return errInvalid("input", "unsupported_parameter", "Token-array input is not supported by embedding model '%s'; send text.", head.Model)
	}
	if len(req.Input.Texts) == 0 || len(req.Input.Texts) > 2048 {
		return errInvalid("input", "invalid_value", "Invalid 'input': between 1 and 2048 texts, got %d.", len(req.Input.Texts))
	}
	for i, t := range req.Input.Texts {
		if t == "" {
			return errInvalid("input", "invalid_value", "Invalid 'input': text %d is empty.", i)
		}
	}
	format := "float"
	if req.EncodingFormat != nil {
		format = *req.EncodingFormat
		if format != "float" && format != "base64" {
			return errInvalid("encoding_format", "invalid_value", "Invalid 'encoding_format': '%s'. Supported values are: 'float' and 'base64'.", format)
		}
	}
	if req.Dimensions != nil && (*req.Dimensions < 1 || *req.Dimensions > emb.Dim()) {
		return errInvalid("dimensions", "invalid_value", "Invalid 'dimensions': model '%s' produces 1 to %d dimensions, got %d.", head.Model, emb.Dim(), *req.Dimensions)
	}
	vecs, err := emb.Embed(c.UserContext(), req.Input.Texts)
	if err != nil {
		return errInternal("embedding failed: " + err.Error())
	}
	if req.Dimensions != nil && *req.Dimensions < emb.Dim() {
		vecs = shortenEmbeddings(vecs, *req.Dimensions) // embedutil.go
	}
	resp := EmbeddingResponse{Object: "list", Model: head.Model}
	words := 0
	for i, v := range vecs {
		e := Embedding{Object: "embedding", Index: i, Embedding: v}
		if format == "base64" {
			e.Embedding = float32Base64(v)
		}
		resp.Data = append(resp.Data, e)
		words += len(strings.Fields(req.Input.Texts[i]))
	}
	// Usage counts whitespace-separated words: the lexical embedder has no tokenizer.
	resp.Usage = Usage{PromptTokens: words, TotalTokens: words}
	return c.JSON(resp)
}
