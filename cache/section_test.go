package cache

import (
	"errors"
	"testing"
)

// The cache section validates its own keys and names them relative to the
// section (the config loader prefixes "cache." and finds the line).
func TestSectionValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*Section)
		key  string // "" = valid
	}{
		{"defaults", func(*Section) {}, ""},
		{"store", func(s *Section) { s.Store = "postgres" }, "store"},
		{"index", func(s *Section) { s.Index = "faiss" }, "index"},
		{"embedder", func(s *Section) { s.Embedder = "word2vec" }, "embedder"},
		{"redis store needs addr", func(s *Section) { s.Store = "redis" }, "redis.addr"},
		{"milvus needs addr", func(s *Section) { s.Index = "milvus" }, "milvus.addr"},
		{"bert needs path", func(s *Section) { s.Embedder = "bert" }, "bert.path"},
		{"upstream embedder needs dim", func(s *Section) {
			s.Embedder = "upstream"
			s.UpstreamEmbedder.BaseURL = "http://x"
			s.UpstreamEmbedder.Model = "m"
		}, "upstream_embedder"},
		{"negative timeout", func(s *Section) { s.Redis.ReadTimeout = -1 }, "redis"},
	} {
		s := &Section{}
		tc.set(s)
		s.ApplyDefaults()
		err := s.Validate()
		var se *SectionError
		switch {
		case tc.key == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.key != "" && (!errors.As(err, &se) || se.Key != tc.key):
			t.Errorf("%s: got %v, want an error for key %q", tc.name, err, tc.key)
		}
	}
	s := &Section{}
	s.ApplyDefaults()
	if s.Store != "sqlite" || s.Index != "hnsw" || s.Embedder != "lexical" || s.Pipeline.Default.Threshold != DefaultThreshold || !s.CacheEnabled() {
		t.Errorf("defaults: %+v", s)
	}
	s.Pipeline.KeyMode = "whole-body" // the pipeline's own error, not a SectionError
	if err := s.Validate(); !errors.Is(err, ErrConfig) || errors.As(err, new(*SectionError)) {
		t.Errorf("pipeline key_mode: %v", err)
	}
}
