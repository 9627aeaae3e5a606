package cache

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	_ "github.com/mattn/go-sqlite3" // database/sql driver "sqlite3"
)

// ErrCorrupt reports a stored row that cannot be decoded.
var ErrCorrupt = errors.New("cache: corrupt stored entry")

// SQLiteStore is the default Store: one SQLite file in WAL mode with a busy
// timeout, prepared statements, TTL expiry on read and on Purge, and vectors
// as little-endian float32 blobs. Entries survive process restarts. Safe for
// concurrent use (database/sql pools connections; SQLite serializes writers).
type SQLiteStore struct {
	db     *sql.DB
	now    func() time.Time
	mu     sync.RWMutex // guards closed against in-flight statements
	closed bool

	put, get, del, touch, addHits, scanAll, scanNS, purge *sql.Stmt
}

const sqliteSchema = `
CREATE TABLE IF NOT EXISTS entries (
	ns       TEXT    NOT NULL,
	id       TEXT    NOT NULL,
	key      TEXT    NOT NULL,
	response BLOB    NOT NULL,
	vector   BLOB,
	cost     REAL    NOT NULL DEFAULT 0,
	created  INTEGER NOT NULL,
	expires  INTEGER NOT NULL DEFAULT 0,
	hits     INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (ns, id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS entries_expires ON entries(expires) WHERE expires > 0;
`

// OpenSQLite opens (creating if needed) the store at path. now may be nil
// (time.Now); tests pass a fake clock.
func OpenSQLite(path string, now func() time.Time) (*SQLiteStore, error) {
	if now == nil {
		now = time.Now
	}
	if path != ":memory:" && !strings.HasPrefix(path, "file:") {
		// The file holds every tenant's prompts and answers: create it
		// readable by the owner only (SQLite gives its -wal and -shm files
		// the same mode). An existing file keeps its mode.
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("sqlite %s: %w", path, err)
		}
		f.Close()
	}
	q := url.Values{}
	q.Set("_journal_mode", "WAL")
	q.Set("_busy_timeout", "5000")
	q.Set("_synchronous", "NORMAL")
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite3", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("sqlite %s: %w", path, err)
	}
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(8)
	if _, err := db.Exec(sqliteSchema); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite %s: schema: %w", path, err)
	}
	s := &SQLiteStore{db: db, now: now}
	stmts := []struct {
		dst **sql.Stmt
		q   string
	}{
		{&s.put, `INSERT INTO entries(ns,id,key,response,vector,cost,created,expires,hits) VALUES(?,?,?,?,?,?,?,?,?)
			ON CONFLICT(ns,id) DO UPDATE SET key=excluded.key, response=excluded.response, vector=excluded.vector,
			cost=excluded.cost, created=excluded.created, expires=excluded.expires, hits=excluded.hits`},
		{&s.get, `SELECT key,response,vector,cost,created,expires,hits FROM entries WHERE ns=? AND id=? AND (expires=0 OR expires>?)`},
		{&s.del, `DELETE FROM entries WHERE ns=? AND id=?`},
		{&s.touch, `UPDATE entries SET hits=hits+1 WHERE ns=? AND id=? AND (expires=0 OR expires>?)`},
		{&s.addHits, `UPDATE entries SET hits=hits+? WHERE ns=? AND id=? AND (expires=0 OR expires>?)`},
		{&s.scanAll, `SELECT ns,id,key,response,vector,cost,created,expires,hits FROM entries WHERE expires=0 OR expires>? ORDER BY created`},
		{&s.scanNS, `SELECT ns,id,key,response,vector,cost,created,expires,hits FROM entries WHERE ns=? AND (expires=0 OR expires>?) ORDER BY created`},
		{&s.purge, `DELETE FROM entries WHERE expires>0 AND expires<=?`},
	}
	for _, st := range stmts {
		if *st.dst, err = db.Prepare(st.q); err != nil {
			db.Close()
			return nil, fmt.Errorf("sqlite %s: prepare: %w", path, err)
		}
	}
	return s, nil
}

// EncodeVector returns v as little-endian float32 bytes (nil for nil).
func EncodeVector(v []float32) []byte {
	if v == nil {
		return nil
	}
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// DecodeVector parses little-endian float32 bytes; the length must be a
// multiple of 4.
func DecodeVector(b []byte) ([]float32, error) {
	if len(b)%4 != 0 {
		return nil, fmt.Errorf("%w: vector blob of %d bytes", ErrCorrupt, len(b))
	}
	if len(b) == 0 {
		return nil, nil
	}
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v, nil
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

func (s *SQLiteStore) begin() error {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return ErrClosed
	}
	return nil
}

func (s *SQLiteStore) end() { s.mu.RUnlock() }

// Put inserts or replaces e.
func (s *SQLiteStore) Put(ctx context.Context, e *Entry) error {
	if err := s.begin(); err != nil {
		return err
	}
	defer s.end()
	resp := e.Response
	if resp == nil {
		resp = []byte{}
	}
	_, err := s.put.ExecContext(ctx, e.Namespace, e.ID, e.Key, resp, EncodeVector(e.Vector), e.Cost,
		unixNano(e.CreatedAt), unixNano(e.ExpiresAt), e.Hits)
	if err != nil {
		return fmt.Errorf("sqlite: put %s: %w", e.ID, err)
	}
	return nil
}

// Get returns the live entry (a new value owned by the caller).
func (s *SQLiteStore) Get(ctx context.Context, namespace, id string) (*Entry, error) {
	if err := s.begin(); err != nil {
		return nil, err
	}
	defer s.end()
	e := &Entry{ID: id, Namespace: namespace}
	var vec []byte
	var created, expires int64
	err := s.get.QueryRowContext(ctx, namespace, id, s.now().UnixNano()).Scan(&e.Key, &e.Response, &vec, &e.Cost, &created, &expires, &e.Hits)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("sqlite: %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: get %s: %w", id, err)
	}
	if e.Vector, err = DecodeVector(vec); err != nil {
		return nil, fmt.Errorf("sqlite: get %s: %w", id, err)
	}
	e.CreatedAt, e.ExpiresAt = fromNano(created), fromNano(expires)
	return e, nil
}

// Delete removes the entry; absent ids are not an error.
func (s *SQLiteStore) Delete(ctx context.Context, namespace, id string) error {
	if err := s.begin(); err != nil {
		return err
	}
	defer s.end()
	if _, err := s.del.ExecContext(ctx, namespace, id); err != nil {
		return fmt.Errorf("sqlite: delete %s: %w", id, err)
	}
	return nil
}

// Touch increments the hit count of a live entry.
func (s *SQLiteStore) Touch(ctx context.Context, namespace, id string) error {
	if err := s.begin(); err != nil {
		return err
	}
	defer s.end()
	r, err := s.touch.ExecContext(ctx, namespace, id, s.now().UnixNano())
	if err != nil {
		return fmt.Errorf("sqlite: touch %s: %w", id, err)
	}
	if n, _ := r.RowsAffected(); n == 0 {
		return fmt.Errorf("sqlite: touch %s: %w", id, ErrNotFound)
	}
	return nil
}

// AddHits adds each hit count to its live entry in one transaction (absent
// or expired entries are skipped). It implements HitAdder.
func (s *SQLiteStore) AddHits(ctx context.Context, hits []Hit) error {
	if err := s.begin(); err != nil {
		return err
	}
	defer s.end()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite: add hits: %w", err)
	}
	st := tx.StmtContext(ctx, s.addHits)
	now := s.now().UnixNano()
	for _, h := range hits {
		if _, err := st.ExecContext(ctx, h.N, h.Namespace, h.ID, now); err != nil {
			_ = tx.Rollback()
			return fmt.Errorf("sqlite: add hits %s: %w", h.ID, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlite: add hits: %w", err)
	}
	return nil
}

var _ HitAdder = (*SQLiteStore)(nil)

// Scan visits the live entries of namespace ("" = all), oldest first. fn must
// not call back into the store (the scan holds a connection and the close lock).
func (s *SQLiteStore) Scan(ctx context.Context, namespace string, fn func(*Entry) error) error {
	if err := s.begin(); err != nil {
		return err
	}
	defer s.end()
	now := s.now().UnixNano()
	var rows *sql.Rows
	var err error
	if namespace == "" {
		rows, err = s.scanAll.QueryContext(ctx, now)
	} else {
		rows, err = s.scanNS.QueryContext(ctx, namespace, now)
	}
	if err != nil {
		return fmt.Errorf("sqlite: scan: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		e := &Entry{}
		var vec []byte
		var created, expires int64
		if err := rows.Scan(&e.Namespace, &e.ID, &e.Key, &e.Response, &vec, &e.Cost, &created, &expires, &e.Hits); err != nil {
			return fmt.Errorf("sqlite: scan: %w", err)
		}
		if e.Vector, err = DecodeVector(vec); err != nil {
			return fmt.Errorf("sqlite: scan %s: %w", e.ID, err)
		}
		e.CreatedAt, e.ExpiresAt = fromNano(created), fromNano(expires)
		if err := fn(e); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sqlite: scan: %w", err)
	}
	return nil
}

// Purge deletes every expired entry and returns how many it removed.
func (s *SQLiteStore) Purge(ctx context.Context) (int64, error) {
	if err := s.begin(); err != nil {
		return 0, err
	}
	defer s.end()
	r, err := s.purge.ExecContext(ctx, s.now().UnixNano())
	if err != nil {
		return 0, fmt.Errorf("sqlite: purge: %w", err)
	}
	n, _ := r.RowsAffected()
	return n, nil
}

// Close closes the statements and the database; later calls return ErrClosed.
// Closing twice is allowed.
func (s *SQLiteStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	for _, st := range []*sql.Stmt{s.put, s.get, s.del, s.touch, s.addHits, s.scanAll, s.scanNS, s.purge} {
		st.Close()
	}
	return s.db.Close()
}

var _ Store = (*SQLiteStore)(nil)
