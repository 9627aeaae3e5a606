package safetensors

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// File names of a Hugging Face model directory.
const (
	SingleFileName = "model.safetensors"
	IndexFileName  = "model.safetensors.index.json"
)

// MaxIndexSize bounds the size of an index file in bytes.
const MaxIndexSize = 64 << 20

// Set is the tensors of one checkpoint: a single model.safetensors, or the
// shards named by model.safetensors.index.json. Methods are safe for
// concurrent use until Close.
type Set struct {
	Dir string
	// IndexMetadata is the index's "metadata" object (e.g. "total_size"),
	// values as raw JSON; nil for a single-file checkpoint.
	IndexMetadata map[string]json.RawMessage

	files []*File          // sorted by path
	where map[string]*File // tensor name → file holding it
}

// OpenDir opens the checkpoint in dir: model.safetensors if present, else
// the shards named by model.safetensors.index.json (the order transformers
// uses). Every shard named in the index is opened and validated, and every
// tensor the index lists must be in its shard (tensors a shard holds beyond
// the index are ignored, as transformers does). Shard names must be plain
// relative names inside dir (no "..", no absolute paths); a shard that is
// a symlink (as in a Hugging Face cache snapshot) is followed. The caller
// must Close the set.
func OpenDir(dir string) (*Set, error) {
	single := filepath.Join(dir, SingleFileName)
	f, err := Open(single)
	if err == nil {
		s := &Set{Dir: dir, files: []*File{f}, where: make(map[string]*File, len(f.Tensors))}
		for name := range f.Tensors {
			s.where[name] = f
		}
		return s, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	indexPath := filepath.Join(dir, IndexFileName)
	if _, ierr := os.Stat(indexPath); ierr != nil {
		if errors.Is(ierr, fs.ErrNotExist) {
			return nil, fmt.Errorf("safetensors: %s: neither %s nor %s: %w", dir, SingleFileName, IndexFileName, errors.Join(ErrNotFound, err))
		}
		return nil, fmt.Errorf("safetensors: %w", ierr)
	}
	return openIndex(dir, indexPath)
}

func openIndex(dir, indexPath string) (*Set, error) {
	bad := func(tensor, field, format string, args ...any) error {
		return &FormatError{Path: indexPath, Tensor: tensor, Field: field, Msg: fmt.Sprintf(format, args...), Err: ErrMalformed}
	}
	data, err := readBounded(indexPath, MaxIndexSize)
	if err != nil {
		return nil, err
	}
	if err := checkJSON(indexPath, data, "index"); err != nil {
		return nil, err
	}
	var top map[string]json.RawMessage
	if len(data) == 0 || firstNonSpace(data) != '{' {
		return nil, bad("", "index", "must be a JSON object")
	}
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, bad("", "index", "%v", err)
	}
	s := &Set{Dir: dir}
	if raw, ok := top["metadata"]; ok && string(raw) != "null" {
		if len(raw) == 0 || raw[0] != '{' {
			return nil, bad("", "metadata", "must be an object, found %s", jsonKind(raw))
		}
		if err := json.Unmarshal(raw, &s.IndexMetadata); err != nil {
			return nil, bad("", "metadata", "%v", err)
		}
	}
	raw, ok := top["weight_map"]
	if !ok {
		return nil, bad("", "weight_map", "missing")
	}
	if len(raw) == 0 || raw[0] != '{' {
		return nil, bad("", "weight_map", "must be an object, found %s", jsonKind(raw))
	}
	var wm map[string]json.RawMessage
	if err := json.Unmarshal(raw, &wm); err != nil {
		return nil, bad("", "weight_map", "%v", err)
	}
	if len(wm) == 0 {
		return nil, bad("", "weight_map", "is empty")
	}
	shardOf := make(map[string]string, len(wm))
	var shards []string
	for name, v := range wm {
		if len(v) == 0 || v[0] != '"' {
			return nil, bad(name, "weight_map", "shard must be a file name string, found %s", jsonKind(v))
		}
		var file string
		if err := json.Unmarshal(v, &file); err != nil {
			return nil, bad(name, "weight_map", "%v", err)
		}
		if !filepath.IsLocal(file) || strings.ContainsRune(file, '\\') || filepath.Clean(file) != file {
			return nil, bad(name, "weight_map", "shard %s is not a plain file name inside %s", quoteShort(file), dir)
		}
		if _, seen := shardOf[name]; !seen {
			shardOf[name] = file
		}
		shards = append(shards, file)
	}
	slices.Sort(shards)
	shards = slices.Compact(shards)
	byName := make(map[string]*File, len(shards))
	for _, sh := range shards {
		f, err := Open(filepath.Join(dir, sh))
		if err != nil {
			for _, g := range s.files {
				g.Close()
			}
			if errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("safetensors: %s: shard %s named in the weight_map is missing: %w", indexPath, quoteShort(sh), errors.Join(ErrNotFound, err))
			}
			return nil, err
		}
		s.files = append(s.files, f)
		byName[sh] = f
	}
	s.where = make(map[string]*File, len(shardOf))
	for name, sh := range shardOf {
		f := byName[sh]
		if _, ok := f.Tensors[name]; !ok {
			s.Close()
			return nil, &FormatError{Path: f.Path, Tensor: name, Field: "weight_map",
				Msg: fmt.Sprintf("listed in %s but missing from the shard", IndexFileName), Err: ErrMalformed}
		}
		s.where[name] = f
	}
	return s, nil
}

func firstNonSpace(b []byte) byte {
	for _, c := range b {
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return c
		}
	}
	return 0
}

// readBounded reads a whole file that must not exceed limit bytes.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > limit {
		return nil, &FormatError{Path: path, Field: "size", Msg: fmt.Sprintf("%d bytes, larger than the limit of %d bytes", st.Size(), limit), Err: ErrMalformed}
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("safetensors: %s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, &FormatError{Path: path, Field: "size", Msg: fmt.Sprintf("larger than the limit of %d bytes", limit), Err: ErrMalformed}
	}
	return data, nil
}

// Files returns the open files of the set, sorted by path. They stay owned
// by the set (closed by Set.Close).
func (s *Set) Files() []*File { return slices.Clone(s.files) }

// Info describes a tensor; TensorInfo offsets are relative to its shard.
func (s *Set) Info(name string) (TensorInfo, bool) {
	f, ok := s.where[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.Info(name)
}

// Names returns all tensor names of the checkpoint, sorted.
func (s *Set) Names() []string {
	names := make([]string, 0, len(s.where))
	for n := range s.where {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func (s *Set) file(name string) (*File, error) {
	f, ok := s.where[name]
	if !ok {
		return nil, fmt.Errorf("safetensors: %s: tensor %s: %w", s.Dir, quoteShort(name), ErrNotFound)
	}
	return f, nil
}

// ReadFloat32 is File.ReadFloat32 on the shard holding the tensor.
func (s *Set) ReadFloat32(name string) ([]float32, []int64, error) {
	f, err := s.file(name)
	if err != nil {
		return nil, nil, err
	}
	return f.ReadFloat32(name)
}

// ReadFloat32Into is File.ReadFloat32Into on the shard holding the tensor.
func (s *Set) ReadFloat32Into(name string, dst []float32) error {
	f, err := s.file(name)
	if err != nil {
		return err
	}
	return f.ReadFloat32Into(name, dst)
}

// ReadRaw is File.ReadRaw on the shard holding the tensor.
func (s *Set) ReadRaw(name string) ([]byte, error) {
	f, err := s.file(name)
	if err != nil {
		return nil, err
	}
	return f.ReadRaw(name)
}

// Close closes every shard; it returns the first error.
func (s *Set) Close() error {
	var first error
	for _, f := range s.files {
		if err := f.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
