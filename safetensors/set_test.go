package safetensors

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func writeFile(t *testing.T, path string, ts []Tensor) {
	t.Helper()
	if err := Write(path, ts, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
}

func f32(name string, v ...float32) Tensor {
	return Tensor{Name: name, DType: F32, Shape: []int64{int64(len(v))}, Data: EncodeF32(v)}
}

func TestOpenDirSingle(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, SingleFileName), []Tensor{f32("b", 2, 3), f32("a", 1)})
	s, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.Names(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("Names = %v", got)
	}
	v, shape, err := s.ReadFloat32("b")
	if err != nil || !slices.Equal(v, []float32{2, 3}) || !slices.Equal(shape, []int64{2}) {
		t.Fatalf("ReadFloat32(b) = %v %v %v", v, shape, err)
	}
	if _, ok := s.Info("zz"); ok {
		t.Error("Info of a missing tensor succeeded")
	}
	if _, _, err := s.ReadFloat32("zz"); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing tensor: %v", err)
	}
	if s.IndexMetadata != nil || len(s.Files()) != 1 {
		t.Errorf("single-file set: %v %v", s.IndexMetadata, s.Files())
	}
}

func TestOpenDirEmpty(t *testing.T) {
	dir := t.TempDir()
	_, err := OpenDir(dir)
	if !errors.Is(err, ErrNotFound) || !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("err = %v", err)
	}
}

const index2 = `{"metadata":{"total_size":16},"weight_map":{
 "model.embed.weight":"model-00001-of-00002.safetensors",
 "model.norm.weight":"model-00001-of-00002.safetensors",
 "lm_head.weight":"model-00002-of-00002.safetensors"}}`

func shardedDir(t *testing.T, index string) string {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "model-00001-of-00002.safetensors"), []Tensor{f32("model.embed.weight", 1, 2), f32("model.norm.weight", 3)})
	writeFile(t, filepath.Join(dir, "model-00002-of-00002.safetensors"), []Tensor{f32("lm_head.weight", 4), f32("extra", 5)})
	if err := os.WriteFile(filepath.Join(dir, IndexFileName), []byte(index), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestOpenDirSharded(t *testing.T) {
	dir := shardedDir(t, index2)
	s, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got, want := s.Names(), []string{"lm_head.weight", "model.embed.weight", "model.norm.weight"}; !slices.Equal(got, want) {
		t.Fatalf("Names = %v, want %v", got, want)
	}
	if string(s.IndexMetadata["total_size"]) != "16" {
		t.Errorf("IndexMetadata = %v", s.IndexMetadata)
	}
	for name, want := range map[string][]float32{"model.embed.weight": {1, 2}, "model.norm.weight": {3}, "lm_head.weight": {4}} {
		v, _, err := s.ReadFloat32(name)
		if err != nil || !slices.Equal(v, want) {
			t.Errorf("%s = %v, %v", name, v, err)
		}
		raw, err := s.ReadRaw(name)
		if err != nil || len(raw) != 4*len(want) {
			t.Errorf("raw %s = %v, %v", name, raw, err)
		}
		dst := make([]float32, len(want))
		if err := s.ReadFloat32Into(name, dst); err != nil || !slices.Equal(dst, want) {
			t.Errorf("into %s = %v, %v", name, dst, err)
		}
	}
	if info, ok := s.Info("lm_head.weight"); !ok || info.DType != F32 || !slices.Equal(info.Shape, []int64{1}) || info.End-info.Begin != 4 {
		t.Errorf("Info = %+v", info)
	}
	if len(s.Files()) != 2 {
		t.Errorf("Files = %d", len(s.Files()))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestOpenDirBadIndex(t *testing.T) {
	wm := func(entries string) string { return `{"weight_map":{` + entries + `}}` }
	cases := []struct {
		name     string
		index    string
		sentinel error
		want     []string // substrings of the message
	}{
		{"parent traversal", wm(`"lm_head.weight":"../model-00002-of-00002.safetensors"`), ErrMalformed, []string{"lm_head.weight", "../model-00002", "weight_map"}},
		{"absolute path", wm(`"lm_head.weight":"/etc/passwd"`), ErrMalformed, []string{"/etc/passwd", "not a plain file name"}},
		{"inner traversal", wm(`"lm_head.weight":"sub/../model-00002-of-00002.safetensors"`), ErrMalformed, []string{"not a plain file name"}},
		{"empty file name", wm(`"lm_head.weight":""`), ErrMalformed, []string{"lm_head.weight"}},
		{"missing shard", wm(`"lm_head.weight":"model-00003-of-00003.safetensors"`), ErrNotFound, []string{"model-00003-of-00003.safetensors", "missing"}},
		{"tensor not in shard", wm(`"nope.weight":"model-00002-of-00002.safetensors"`), ErrMalformed, []string{`"nope.weight"`, "model-00002-of-00002.safetensors", "missing from the shard"}},
		{"shard not a string", wm(`"lm_head.weight":2`), ErrMalformed, []string{"lm_head.weight", "must be a file name string"}},
		{"weight_map missing", `{"metadata":{}}`, ErrMalformed, []string{"weight_map", "missing"}},
		{"weight_map array", `{"weight_map":[]}`, ErrMalformed, []string{"weight_map", "must be an object"}},
		{"weight_map empty", `{"weight_map":{}}`, ErrMalformed, []string{"weight_map", "empty"}},
		{"metadata not object", `{"metadata":3,"weight_map":{"lm_head.weight":"model-00002-of-00002.safetensors"}}`, ErrMalformed, []string{"metadata", "must be an object"}},
		{"duplicate tensor", wm(`"lm_head.weight":"model-00002-of-00002.safetensors","lm_head.weight":"model-00001-of-00002.safetensors"`), ErrMalformed, []string{"lm_head.weight", "duplicate key"}},
		{"not json", `weight_map`, ErrMalformed, []string{IndexFileName, "JSON"}},
		{"top-level array", `[1]`, ErrMalformed, []string{"must be a JSON object"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := shardedDir(t, c.index)
			s, err := OpenDir(dir)
			if err == nil {
				s.Close()
				t.Fatal("accepted")
			}
			if !errors.Is(err, c.sentinel) {
				t.Fatalf("err %v is not %v", err, c.sentinel)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestOpenDirBadShard(t *testing.T) {
	dir := shardedDir(t, index2)
	shard := filepath.Join(dir, "model-00002-of-00002.safetensors")
	if err := os.WriteFile(shard, image(`{"lm_head.weight":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, make([]byte, 4)), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := OpenDir(dir)
	if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), shard) || !strings.Contains(err.Error(), "lm_head.weight") {
		t.Fatalf("err = %v", err)
	}
}

func TestOpenDirIndexTooLarge(t *testing.T) {
	dir := shardedDir(t, index2)
	// a sparse file just past the limit: no real disk use
	if err := os.Truncate(filepath.Join(dir, IndexFileName), MaxIndexSize+1); err != nil {
		t.Fatal(err)
	}
	_, err := OpenDir(dir)
	if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("err = %v", err)
	}
}

// Concurrent reads of one set are safe (run with -race).
func TestSetConcurrentReads(t *testing.T) {
	s, err := OpenDir(shardedDir(t, index2))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	errs := make(chan error, 8)
	for g := range 8 {
		go func() {
			var err error
			for range 50 {
				name := s.Names()[g%3]
				if _, _, e := s.ReadFloat32(name); e != nil {
					err = e
				}
			}
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// With both a single file and an index, the single file wins.
func TestOpenDirPrefersSingleFile(t *testing.T) {
	dir := shardedDir(t, index2)
	writeFile(t, filepath.Join(dir, SingleFileName), []Tensor{f32("only", 7)})
	s, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.Names(); !slices.Equal(got, []string{"only"}) {
		t.Fatalf("Names = %v", got)
	}
}

// A shard reached through a symlink (Hugging Face cache layout) opens.
func TestOpenDirSymlinkedShard(t *testing.T) {
	dir := shardedDir(t, index2)
	blobs := t.TempDir()
	name := "model-00002-of-00002.safetensors"
	if err := os.Rename(filepath.Join(dir, name), filepath.Join(blobs, "blob")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(blobs, "blob"), filepath.Join(dir, name)); err != nil {
		t.Skip("no symlinks:", err)
	}
	s, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if v, _, err := s.ReadFloat32("lm_head.weight"); err != nil || !slices.Equal(v, []float32{4}) {
		t.Fatalf("lm_head = %v, %v", v, err)
	}
}
