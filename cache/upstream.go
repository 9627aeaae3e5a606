package cache

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// ErrUpstream reports a failed or malformed /v1/embeddings call.
var ErrUpstream = errors.New("cache: upstream embeddings")

// UpstreamConfig configures an OpenAI-compatible /v1/embeddings embedder.
type UpstreamConfig struct {
	BaseURL string // e.g. "https://api.openai.com/v1" (the "/embeddings" path is appended)
	APIKey  string // sent as "Authorization: Bearer ..." when set
	Model   string // e.g. "text-embedding-3-small"
	Dim     int    // expected vector length (required; checked on every response)
	// Timeout per call; 0 = 10 s.
	Timeout time.Duration
	// MaxBatch is the most texts per request; 0 = 64.
	MaxBatch int
	// Client overrides the HTTP client (tests).
	Client *http.Client
}

// Upstream embeds texts with a remote OpenAI-compatible embeddings endpoint.
// Vectors are L2-normalized locally (not every server normalizes). Safe for
// concurrent use.
type Upstream struct {
	cfg    UpstreamConfig
	client *http.Client
}

// NewUpstream validates cfg and returns the embedder.
func NewUpstream(cfg UpstreamConfig) (*Upstream, error) {
	if cfg.BaseURL == "" || cfg.Model == "" || cfg.Dim <= 0 {
		return nil, fmt.Errorf("%w: upstream embedder needs base_url, model and dim", ErrConfig)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.MaxBatch == 0 {
		cfg.MaxBatch = 64
	}
	c := cfg.Client
	if c == nil {
		c = &http.Client{Timeout: cfg.Timeout}
	}
	return &Upstream{cfg: cfg, client: c}, nil
}

// Dim is the configured vector length.
func (u *Upstream) Dim() int { return u.cfg.Dim }

// Name is "upstream:" plus the model.
func (u *Upstream) Name() string { return "upstream:" + u.cfg.Model }

type embReq struct {
	Model string   `json:"model"`
	Input []string `json:"input"`
}

type embResp struct {
	Data []struct {
		Index     int       `json:"index"`
		Embedding []float32 `json:"embedding"`
	} `json:"data"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// Embed returns one new L2-normalized vector per text, in order.
func (u *Upstream) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, 0, len(texts))
	for len(texts) > 0 {
		n := min(len(texts), u.cfg.MaxBatch)
		vs, err := u.batch(ctx, texts[:n])
		if err != nil {
			return nil, err
		}
		out = append(out, vs...)
		texts = texts[n:]
	}
	return out, nil
}

func (u *Upstream) batch(ctx context.Context, texts []string) ([][]float32, error) {
	body, err := json.Marshal(embReq{Model: u.cfg.Model, Input: texts})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, u.cfg.Timeout)
	defer cancel()
	url := strings.TrimRight(u.cfg.BaseURL, "/") + "/embeddings"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUpstream, err)
	}
	req.Header.Set("Content-Type", "application/json")
	if u.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+u.cfg.APIKey)
	}
	resp, err := u.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrUpstream, url, err)
	}
	defer resp.Body.Close()
	// Bound the response: dim floats as JSON text, generously.
	limit := int64(len(texts))*int64(u.cfg.Dim)*32 + 1<<16
	raw, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: reading body: %v", ErrUpstream, url, err)
	}
	if int64(len(raw)) > limit {
		return nil, fmt.Errorf("%w: %s: response larger than %d bytes", ErrUpstream, url, limit)
	}
	var er embResp
	if err := json.Unmarshal(raw, &er); err != nil {
		return nil, fmt.Errorf("%w: %s: status %d: decoding: %v", ErrUpstream, url, resp.StatusCode, err)
	}
	if resp.StatusCode != http.StatusOK {
		msg := ""
		if er.Error != nil {
			msg = er.Error.Message
		}
		return nil, fmt.Errorf("%w: %s: status %d: %s", ErrUpstream, url, resp.StatusCode, msg)
	}
	if len(er.Data) != len(texts) {
		return nil, fmt.Errorf("%w: %s: %d embeddings for %d inputs", ErrUpstream, url, len(er.Data), len(texts))
	}
	out := make([][]float32, len(texts))
	for _, d := range er.Data {
		if d.Index < 0 || d.Index >= len(texts) || out[d.Index] != nil {
			return nil, fmt.Errorf("%w: %s: bad or repeated index %d", ErrUpstream, url, d.Index)
		}
		if len(d.Embedding) != u.cfg.Dim {
			return nil, fmt.Errorf("%w: %s: data[%d].embedding has %d floats, want %d", ErrDim, url, d.Index, len(d.Embedding), u.cfg.Dim)
		}
		normalize(d.Embedding)
		out[d.Index] = d.Embedding
	}
	return out, nil
}

var _ Embedder = (*Upstream)(nil)
