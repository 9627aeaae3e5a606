package cache

import (
	"errors"
	"fmt"
	"os"
)

// Default is the default single-process stack: a SQLite store at a path, an
// in-process HNSW index snapshotted next to it (path + ".hnsw"), and the
// lexical embedder.
type Default struct {
	*Cache
	Store *SQLiteStore
	Index *HNSW
	path  string
}

// OpenDefault opens (or creates) the SQLite file at path, loads the HNSW
// snapshot path+".hnsw" when present (a missing or unreadable snapshot is
// rebuilt from the store), and builds the cache. dim 0 = DefaultLexicalDim.
// Close saves the snapshot and closes everything.
func OpenDefault(path string, cfg Config, dim int, opts ...Option) (*Default, error) {
	emb, err := NewLexical(dim)
	if err != nil {
		return nil, err
	}
	st, err := OpenSQLite(path, nil)
	if err != nil {
		return nil, err
	}
	ix, err := NewHNSW(HNSWConfig{Dim: emb.Dim(), Seed: 1})
	if err != nil {
		st.Close()
		return nil, err
	}
	if err := ix.LoadFile(path + ".hnsw"); err != nil && !errors.Is(err, os.ErrNotExist) {
		// A bad snapshot is not fatal: start empty and rebuild from the store.
		ix, _ = NewHNSW(HNSWConfig{Dim: emb.Dim(), Seed: 1})
	}
	c, err := New(cfg, st, ix, emb, opts...)
	if err != nil {
		st.Close()
		return nil, err
	}
	return &Default{Cache: c, Store: st, Index: ix, path: path}, nil
}

// Close stops the cache, writes the index snapshot and closes the store.
func (d *Default) Close() error {
	err := d.Cache.Close()
	if serr := d.Index.SaveFile(d.path + ".hnsw"); serr != nil && err == nil {
		err = fmt.Errorf("cache: saving index snapshot: %w", serr)
	}
	if cerr := d.Store.Close(); cerr != nil && err == nil {
		err = cerr
	}
	return err
}
