// Package milvusstore implements the semantic cache's vector index
// ([cache.VectorIndex]) on Milvus, through the maintained Go client
// github.com/milvus-io/milvus/client/v2/milvusclient, for deployments where
// several gateway replicas share one index.
//
// # Schema
//
// One collection per vector dimension, named "{prefix}_d{dim}" (e.g.
// "specgate_cache_d384"), with the fields
//
//	pk        VarChar primary key  = hex(SHA-256(namespace)[:16]) + ":" + id
//	id        VarChar              the cache entry id (≤ MaxIDBytes)
//	namespace VarChar partition key the tenant namespace (≤ MaxNamespaceBytes)
//	vector    FloatVector(dim)     index AUTOINDEX, metric COSINE
//
// The primary key combines namespace and id, so the same entry id in two
// namespaces are two rows and an upsert in one tenant can never replace
// another tenant's vector. Every search carries the filter
// `namespace == "<ns>"` (namespace is the partition key, so Milvus prunes
// partitions), and every delete `namespace == "<ns>" && pk == "<pk>"`.
// String literals are quoted by quoteLiteral: backslash, double quote and
// \n \r \t \f are escaped; other control characters and invalid UTF-8 are
// refused with ErrInvalid, because Milvus's expression parser handles them
// inconsistently. (milvusclient's own DeleteOption.WithStringIDs does not
// escape at all; it is not used.)
//
// Searches default to Strong consistency so that a replica sees its own and
// the other replicas' Adds at once; IndexOptions.Consistency trades that for
// latency (Bounded).
//
// The tests run against a FAKE in-process Milvus (fake_server_test.go), a
// gRPC server from milvus-proto's milvuspb that implements only the calls
// this package makes, with brute-force cosine search; it is not Milvus.
package milvusstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/milvus-io/milvus/client/v2/column"
	"github.com/milvus-io/milvus/client/v2/entity"
	"github.com/milvus-io/milvus/client/v2/index"
	"github.com/milvus-io/milvus/client/v2/milvusclient"

	"github.com/specgate/specgate/cache"
)

// Sentinel errors of this package (cache.ErrClosed and cache.ErrDim are
// used where they apply).
var (
	ErrInvalid = errors.New("milvusstore: invalid argument")
	ErrServer  = errors.New("milvusstore: unexpected server reply")
)

// Limits on stored strings (Milvus VarChar max_length of the fields).
const (
	MaxIDBytes        = 512
	MaxNamespaceBytes = 1024
	// MaxTopK is Milvus's limit on search results; larger k is clamped.
	MaxTopK = 16384
)

// Field names of the collection schema.
const (
	FieldPK        = "pk"
	FieldID        = "id"
	FieldNamespace = "namespace"
	FieldVector    = "vector"
)

// DefaultPrefix is the collection name prefix when none is configured.
const DefaultPrefix = "specgate_cache"

// IndexOptions configures an Index.
type IndexOptions struct {
	// Prefix of the collection name; DefaultPrefix when empty. Letters,
	// digits and underscores only, starting with a letter or underscore.
	Prefix string
	// Dim is the vector dimension; 0 = fixed by the first Add or Search.
	Dim int
	// Consistency of searches; entity.ClStrong when 0 (the zero value of
	// entity.ConsistencyLevel is ClStrong).
	Consistency entity.ConsistencyLevel
	// OwnClient makes Close close the client too.
	OwnClient bool
}

// Index is a cache.VectorIndex on Milvus. It is safe for concurrent use.
type Index struct {
	cli    *milvusclient.Client
	opt    IndexOptions
	closed atomic.Bool

	mu    sync.Mutex
	dim   int
	ready bool // collection exists, has its index and is loaded
}

var _ cache.VectorIndex = (*Index)(nil)

// New returns an Index on cli. The caller keeps ownership of cli unless
// opt.OwnClient is set. The collection is created (and loaded) on first use.
func New(cli *milvusclient.Client, opt IndexOptions) (*Index, error) {
	if cli == nil {
		return nil, fmt.Errorf("%w: nil milvus client", ErrInvalid)
	}
	if opt.Prefix == "" {
		opt.Prefix = DefaultPrefix
	}
	if !validName(opt.Prefix) {
		return nil, fmt.Errorf("%w: IndexOptions.Prefix %q: want [A-Za-z_][A-Za-z0-9_]*", ErrInvalid, opt.Prefix)
	}
	if opt.Dim < 0 || opt.Dim > 32768 {
		return nil, fmt.Errorf("%w: IndexOptions.Dim %d outside [0, 32768]", ErrInvalid, opt.Dim)
	}
	return &Index{cli: cli, opt: opt, dim: opt.Dim}, nil
}

// Dial connects to the Milvus at address ("host:19530") and returns an Index
// owning the client.
func Dial(ctx context.Context, cfg *milvusclient.ClientConfig, opt IndexOptions) (*Index, error) {
	cli, err := milvusclient.New(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("milvusstore: connect %s: %w", cfg.Address, err)
	}
	opt.OwnClient = true
	ix, err := New(cli, opt)
	if err != nil {
		_ = cli.Close(ctx)
		return nil, err
	}
	return ix, nil
}

func validName(s string) bool {
	if s == "" || len(s) > 200 {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_', r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// Collection returns the collection name for the index's dimension ("" until
// the dimension is known).
func (x *Index) Collection() string {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.dim == 0 {
		return ""
	}
	return x.collection()
}

func (x *Index) collection() string { return fmt.Sprintf("%s_d%d", x.opt.Prefix, x.dim) }

// Close marks the index closed and closes the client when it owns it.
func (x *Index) Close() error {
	if x.closed.Swap(true) {
		return nil
	}
	if x.opt.OwnClient {
		return x.cli.Close(context.Background())
	}
	return nil
}

// prepare checks v, fixes the dimension, and makes sure the collection
// exists, is indexed and loaded. It returns the collection name.
func (x *Index) prepare(ctx context.Context, v []float32) (string, error) {
	if x.closed.Load() {
		return "", cache.ErrClosed
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(v) == 0 {
		return "", fmt.Errorf("%w: empty vector", cache.ErrDim)
	}
	if x.dim == 0 {
		x.dim = len(v)
	}
	if len(v) != x.dim {
		return "", fmt.Errorf("%w: vector has %d floats, index has %d", cache.ErrDim, len(v), x.dim)
	}
	name := x.collection()
	if x.ready {
		return name, nil
	}
	has, err := x.cli.HasCollection(ctx, milvusclient.NewHasCollectionOption(name))
	if err != nil {
		return "", fmt.Errorf("milvusstore: HasCollection %s: %w", name, err)
	}
	if !has {
		schema := entity.NewSchema().WithName(name).WithDescription("specgate semantic cache vectors").
			WithField(entity.NewField().WithName(FieldPK).WithDataType(entity.FieldTypeVarChar).
				WithMaxLength(32 + 1 + MaxIDBytes).WithIsPrimaryKey(true)).
			WithField(entity.NewField().WithName(FieldID).WithDataType(entity.FieldTypeVarChar).
				WithMaxLength(MaxIDBytes)).
			WithField(entity.NewField().WithName(FieldNamespace).WithDataType(entity.FieldTypeVarChar).
				WithMaxLength(MaxNamespaceBytes).WithIsPartitionKey(true)).
			WithField(entity.NewField().WithName(FieldVector).WithDataType(entity.FieldTypeFloatVector).
				WithDim(int64(x.dim)))
		opt := milvusclient.NewCreateCollectionOption(name, schema).
			WithIndexOptions(milvusclient.NewCreateIndexOption(name, FieldVector, index.NewAutoIndex(entity.COSINE)))
		if err := x.cli.CreateCollection(ctx, opt); err != nil {
			return "", fmt.Errorf("milvusstore: CreateCollection %s: %w", name, err)
		}
	} else if err := x.checkSchema(ctx, name); err != nil {
		return "", err
	}
	task, err := x.cli.LoadCollection(ctx, milvusclient.NewLoadCollectionOption(name))
	if err != nil {
		return "", fmt.Errorf("milvusstore: LoadCollection %s: %w", name, err)
	}
	if err := task.Await(ctx); err != nil {
		return "", fmt.Errorf("milvusstore: LoadCollection %s: %w", name, err)
	}
	x.ready = true
	return name, nil
}

// checkSchema verifies that an existing collection has our fields.
func (x *Index) checkSchema(ctx context.Context, name string) error {
	coll, err := x.cli.DescribeCollection(ctx, milvusclient.NewDescribeCollectionOption(name))
	if err != nil {
		return fmt.Errorf("milvusstore: DescribeCollection %s: %w", name, err)
	}
	want := map[string]entity.FieldType{FieldPK: entity.FieldTypeVarChar, FieldID: entity.FieldTypeVarChar,
		FieldNamespace: entity.FieldTypeVarChar, FieldVector: entity.FieldTypeFloatVector}
	for _, f := range coll.Schema.Fields {
		if t, ok := want[f.Name]; ok && t == f.DataType {
			if f.Name == FieldPK && !f.PrimaryKey {
				break
			}
			delete(want, f.Name)
		}
	}
	if len(want) > 0 {
		return fmt.Errorf("%w: collection %s exists with another schema (fields %v missing or of another type)", ErrInvalid, name, keys(want))
	}
	return nil
}

func keys(m map[string]entity.FieldType) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// primaryKey is the row key of (namespace, id).
func primaryKey(namespace, id string) string {
	sum := sha256.Sum256([]byte(namespace))
	return hex.EncodeToString(sum[:16]) + ":" + id
}

func checkStrings(namespace, id string) error {
	if len(namespace) > MaxNamespaceBytes {
		return fmt.Errorf("%w: namespace of %d bytes > %d", ErrInvalid, len(namespace), MaxNamespaceBytes)
	}
	if id == "" || len(id) > MaxIDBytes {
		return fmt.Errorf("%w: id of %d bytes, want 1..%d", ErrInvalid, len(id), MaxIDBytes)
	}
	if !utf8.ValidString(namespace) || !utf8.ValidString(id) {
		return fmt.Errorf("%w: namespace or id is not valid UTF-8", ErrInvalid)
	}
	return nil
}

// quoteLiteral returns s as a double-quoted Milvus expression string literal.
func quoteLiteral(s string) (string, error) {
	if !utf8.ValidString(s) {
		return "", fmt.Errorf("%w: string %q is not valid UTF-8", ErrInvalid, s)
	}
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '\\':
			b.WriteString(`\\`)
		case '"':
			b.WriteString(`\"`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\f':
			b.WriteString(`\f`)
		default:
			if r < 0x20 || r == 0x7f {
				return "", fmt.Errorf("%w: string %q has control character %U", ErrInvalid, s, r)
			}
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String(), nil
}

// namespaceFilter is the boolean expression selecting namespace's rows.
func namespaceFilter(namespace string) (string, error) {
	q, err := quoteLiteral(namespace)
	if err != nil {
		return "", err
	}
	return FieldNamespace + " == " + q, nil
}

// Add upserts v (copied by the client) under (namespace, id).
func (x *Index) Add(ctx context.Context, namespace, id string, v []float32) error {
	if err := checkStrings(namespace, id); err != nil {
		return err
	}
	if _, err := quoteLiteral(namespace); err != nil {
		return err
	}
	name, err := x.prepare(ctx, v)
	if err != nil {
		return err
	}
	opt := milvusclient.NewColumnBasedInsertOption(name).
		WithVarcharColumn(FieldPK, []string{primaryKey(namespace, id)}).
		WithVarcharColumn(FieldID, []string{id}).
		WithVarcharColumn(FieldNamespace, []string{namespace}).
		WithFloatVectorColumn(FieldVector, x.dim, [][]float32{v})
	res, err := x.cli.Upsert(ctx, opt)
	if err != nil {
		return fmt.Errorf("milvusstore: Upsert %q into %s: %w", id, name, err)
	}
	if res.UpsertCount != 1 {
		return fmt.Errorf("%w: Upsert %q: count %d, want 1", ErrServer, id, res.UpsertCount)
	}
	return nil
}

// Remove deletes (namespace, id); removing an absent id is not an error.
func (x *Index) Remove(ctx context.Context, namespace, id string) error {
	if x.closed.Load() {
		return cache.ErrClosed
	}
	if err := checkStrings(namespace, id); err != nil {
		return err
	}
	x.mu.Lock()
	dim := x.dim
	x.mu.Unlock()
	if dim == 0 {
		return nil // nothing was ever added through this index
	}
	name, err := x.prepare(ctx, make([]float32, dim))
	if err != nil {
		return err
	}
	nsq, err := quoteLiteral(namespace)
	if err != nil {
		return err
	}
	pkq, err := quoteLiteral(primaryKey(namespace, id))
	if err != nil {
		return err
	}
	expr := FieldNamespace + " == " + nsq + " && " + FieldPK + " == " + pkq
	if _, err := x.cli.Delete(ctx, milvusclient.NewDeleteOption(name).WithExpr(expr)); err != nil {
		return fmt.Errorf("milvusstore: Delete %q from %s: %w", id, name, err)
	}
	return nil
}

// Search returns up to k matches of namespace, best (highest cosine) first.
// The result is owned by the caller.
func (x *Index) Search(ctx context.Context, namespace string, v []float32, k int) ([]cache.Match, error) {
	if len(namespace) > MaxNamespaceBytes {
		return nil, fmt.Errorf("%w: namespace of %d bytes > %d", ErrInvalid, len(namespace), MaxNamespaceBytes)
	}
	filter, err := namespaceFilter(namespace)
	if err != nil {
		return nil, err
	}
	name, err := x.prepare(ctx, v)
	if err != nil {
		return nil, err
	}
	if k <= 0 {
		return nil, nil
	}
	k = min(k, MaxTopK)
	opt := milvusclient.NewSearchOption(name, k, []entity.Vector{entity.FloatVector(v)}).
		WithANNSField(FieldVector).
		WithFilter(filter).
		WithConsistencyLevel(x.opt.Consistency)
	rs, err := x.cli.Search(ctx, opt)
	if err != nil {
		return nil, fmt.Errorf("milvusstore: Search %s: %w", name, err)
	}
	if len(rs) != 1 {
		return nil, fmt.Errorf("%w: Search: %d result sets for 1 query", ErrServer, len(rs))
	}
	r := rs[0]
	if r.Err != nil {
		return nil, fmt.Errorf("milvusstore: Search %s: %w", name, r.Err)
	}
	if r.ResultCount > k || r.IDs == nil || r.IDs.Len() < r.ResultCount || len(r.Scores) < r.ResultCount {
		return nil, fmt.Errorf("%w: Search: %d results for k=%d", ErrServer, r.ResultCount, k)
	}
	prefix := primaryKey(namespace, "")
	out := make([]cache.Match, 0, r.ResultCount)
	for i := 0; i < r.ResultCount; i++ {
		pk, err := pkString(r.IDs, i)
		if err != nil {
			return nil, err
		}
		// Defence in depth: a row of another namespace is never returned,
		// even from a server that ignored the filter.
		if !strings.HasPrefix(pk, prefix) {
			continue
		}
		out = append(out, cache.Match{ID: pk[len(prefix):], Score: r.Scores[i]})
	}
	return out, nil
}

func pkString(c column.Column, i int) (string, error) {
	s, err := c.GetAsString(i)
	if err != nil {
		return "", fmt.Errorf("%w: Search: primary key %d: %v", ErrServer, i, err)
	}
	return s, nil
}
