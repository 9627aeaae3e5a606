package cache_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/specgate/specgate/cache"
)

func TestUpstreamEmbedder(t *testing.T) {
	var calls int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		if r.URL.Path != "/v1/embeddings" || r.Header.Get("Authorization") != "Bearer k" {
			http.Error(w, `{"error":{"message":"bad path or key"}}`, 401)
			return
		}
		var req struct {
			Model string   `json:"model"`
			Input []string `json:"input"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Model != "emb" {
			http.Error(w, `{"error":{"message":"bad body"}}`, 400)
			return
		}
		type item struct {
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		}
		var resp struct {
			Data []item `json:"data"`
		}
		for i := len(req.Input) - 1; i >= 0; i-- { // out of order on purpose
			v := []float32{float32(len(req.Input[i])), 0, 0}
			if req.Input[i] == "bad" {
				v = v[:2]
			}
			resp.Data = append(resp.Data, item{i, v})
		}
		json.NewEncoder(w).Encode(resp)
	}))
	defer srv.Close()
	u, err := cache.NewUpstream(cache.UpstreamConfig{BaseURL: srv.URL + "/v1/", APIKey: "k", Model: "emb", Dim: 3, MaxBatch: 2})
	if err != nil {
		t.Fatal(err)
	}
	vs, err := u.Embed(t.Context(), []string{"a", "bb", "ccc"})
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 3 || calls != 2 {
		t.Fatalf("got %d vectors in %d calls, want 3 in 2", len(vs), calls)
	}
	for i, v := range vs {
		if v[0] != 1 || v[1] != 0 {
			t.Errorf("vector %d = %v, want normalized [1 0 0]", i, v)
		}
	}
	if _, err := u.Embed(t.Context(), []string{"bad"}); !errors.Is(err, cache.ErrDim) {
		t.Errorf("short vector: got %v, want ErrDim", err)
	}
	u2, _ := cache.NewUpstream(cache.UpstreamConfig{BaseURL: srv.URL + "/v1", APIKey: "wrong", Model: "emb", Dim: 3})
	if _, err := u2.Embed(t.Context(), []string{"x"}); !errors.Is(err, cache.ErrUpstream) {
		t.Errorf("401: got %v, want ErrUpstream", err)
	}
	if _, err := cache.NewUpstream(cache.UpstreamConfig{BaseURL: srv.URL}); !errors.Is(err, cache.ErrConfig) {
		t.Errorf("missing model: got %v, want ErrConfig", err)
	}
}
