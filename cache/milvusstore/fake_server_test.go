package milvusstore

// This file is a FAKE Milvus: an in-process gRPC server built from
// milvus-proto's MilvusServiceServer that implements only the calls
// milvusclient makes for this package (Connect, DescribeCollection,
// CreateCollection, CreateIndex, DescribeIndex, LoadCollection,
// GetLoadingProgress, GetLoadState, Insert, Upsert, Delete, Search, Flush),
// with exact brute-force cosine search and a tiny parser for the boolean
// expressions this package emits (`f == "s"`, `f in ["a", "b"]`, joined by
// && / and). It is test code, not Milvus; real-server behaviour (segments,
// consistency, ANN recall) is not modelled.

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/milvus-io/milvus-proto/go-api/v2/commonpb"
	"github.com/milvus-io/milvus-proto/go-api/v2/milvuspb"
	"github.com/milvus-io/milvus-proto/go-api/v2/schemapb"
	"github.com/milvus-io/milvus/pkg/v2/util/merr"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

type fakeRow struct {
	strs map[string]string // varchar fields
	vec  []float32
}

type fakeCollection struct {
	schema   *schemapb.CollectionSchema
	pkField  string
	vecField string
	dim      int
	indexes  map[string]*milvuspb.IndexDescription // by field name
	loaded   bool
	rows     map[string]*fakeRow // by primary key
}

type fakeMilvus struct {
	milvuspb.UnimplementedMilvusServiceServer

	mu    sync.Mutex
	colls map[string]*fakeCollection
	exprs []string // every filter/delete expression received
	calls map[string]int
}

// startFakeMilvus serves a fresh fake on 127.0.0.1:0 and returns it and its address.
func startFakeMilvus(t testing.TB) (*fakeMilvus, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeMilvus{colls: map[string]*fakeCollection{}, calls: map[string]int{}}
	srv := grpc.NewServer()
	milvuspb.RegisterMilvusServiceServer(srv, f)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return f, lis.Addr().String()
}

func (f *fakeMilvus) count(name string) {
	f.mu.Lock()
	f.calls[name]++
	f.mu.Unlock()
}

func (f *fakeMilvus) Connect(ctx context.Context, req *milvuspb.ConnectRequest) (*milvuspb.ConnectResponse, error) {
	f.count("Connect")
	return &milvuspb.ConnectResponse{Status: merr.Success(), ServerInfo: &commonpb.ServerInfo{BuildTags: "fake"}, Identifier: 1}, nil
}

func (f *fakeMilvus) CreateCollection(ctx context.Context, req *milvuspb.CreateCollectionRequest) (*commonpb.Status, error) {
	f.count("CreateCollection")
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.colls[req.CollectionName]; ok {
		return merr.Status(merr.WrapErrCollectionIllegalSchema(req.CollectionName, "already exists")), nil
	}
	var s schemapb.CollectionSchema
	if err := proto.Unmarshal(req.Schema, &s); err != nil {
		return merr.Status(merr.WrapErrParameterInvalidMsg("schema: %v", err)), nil
	}
	c := &fakeCollection{schema: &s, indexes: map[string]*milvuspb.IndexDescription{}, rows: map[string]*fakeRow{}}
	for _, fs := range s.Fields {
		if fs.IsPrimaryKey {
			c.pkField = fs.Name
		}
		if fs.DataType == schemapb.DataType_FloatVector {
			c.vecField = fs.Name
			for _, kv := range fs.TypeParams {
				if kv.Key == "dim" {
					c.dim, _ = strconv.Atoi(kv.Value)
				}
			}
		}
	}
	if c.pkField == "" || c.vecField == "" || c.dim <= 0 {
		return merr.Status(merr.WrapErrParameterInvalidMsg("schema needs a primary key and a float vector with dim")), nil
	}
	s.Name = req.CollectionName
	f.colls[req.CollectionName] = c
	return merr.Success(), nil
}

func (f *fakeMilvus) coll(name string) (*fakeCollection, *commonpb.Status) {
	c, ok := f.colls[name]
	if !ok {
		return nil, merr.Status(merr.WrapErrCollectionNotFound(name))
	}
	return c, nil
}

func (f *fakeMilvus) DescribeCollection(ctx context.Context, req *milvuspb.DescribeCollectionRequest) (*milvuspb.DescribeCollectionResponse, error) {
	f.count("DescribeCollection")
	f.mu.Lock()
	defer f.mu.Unlock()
	c, st := f.coll(req.CollectionName)
	if st != nil {
		return &milvuspb.DescribeCollectionResponse{Status: st}, nil
	}
	return &milvuspb.DescribeCollectionResponse{Status: merr.Success(), Schema: c.schema, CollectionName: req.CollectionName,
		CollectionID: 1, ConsistencyLevel: commonpb.ConsistencyLevel_Bounded}, nil
}

func (f *fakeMilvus) CreateIndex(ctx context.Context, req *milvuspb.CreateIndexRequest) (*commonpb.Status, error) {
	f.count("CreateIndex")
	f.mu.Lock()
	defer f.mu.Unlock()
	c, st := f.coll(req.CollectionName)
	if st != nil {
		return st, nil
	}
	if req.FieldName != c.vecField {
		return merr.Status(merr.WrapErrParameterInvalidMsg("index on %q, vector field is %q", req.FieldName, c.vecField)), nil
	}
	c.indexes[req.FieldName] = &milvuspb.IndexDescription{IndexName: req.IndexName, FieldName: req.FieldName,
		Params: req.ExtraParams, State: commonpb.IndexState_Finished}
	return merr.Success(), nil
}

func (f *fakeMilvus) DescribeIndex(ctx context.Context, req *milvuspb.DescribeIndexRequest) (*milvuspb.DescribeIndexResponse, error) {
	f.count("DescribeIndex")
	f.mu.Lock()
	defer f.mu.Unlock()
	c, st := f.coll(req.CollectionName)
	if st != nil {
		return &milvuspb.DescribeIndexResponse{Status: st}, nil
	}
	var out []*milvuspb.IndexDescription
	for _, d := range c.indexes {
		if (req.FieldName == "" || req.FieldName == d.FieldName) && (req.IndexName == "" || req.IndexName == d.IndexName) {
			out = append(out, d)
		}
	}
	if len(out) == 0 {
		return &milvuspb.DescribeIndexResponse{Status: merr.Status(merr.WrapErrIndexNotFound(req.IndexName))}, nil
	}
	return &milvuspb.DescribeIndexResponse{Status: merr.Success(), IndexDescriptions: out}, nil
}

func (f *fakeMilvus) LoadCollection(ctx context.Context, req *milvuspb.LoadCollectionRequest) (*commonpb.Status, error) {
	f.count("LoadCollection")
	f.mu.Lock()
	defer f.mu.Unlock()
	c, st := f.coll(req.CollectionName)
	if st != nil {
		return st, nil
	}
	if _, ok := c.indexes[c.vecField]; !ok { // as in Milvus: no load without a vector index
		return merr.Status(merr.WrapErrIndexNotFoundForCollection(req.CollectionName)), nil
	}
	c.loaded = true
	return merr.Success(), nil
}

func (f *fakeMilvus) GetLoadingProgress(ctx context.Context, req *milvuspb.GetLoadingProgressRequest) (*milvuspb.GetLoadingProgressResponse, error) {
	f.count("GetLoadingProgress")
	f.mu.Lock()
	defer f.mu.Unlock()
	c, st := f.coll(req.CollectionName)
	if st != nil {
		return &milvuspb.GetLoadingProgressResponse{Status: st}, nil
	}
	var p int64
	if c.loaded {
		p = 100
	}
	return &milvuspb.GetLoadingProgressResponse{Status: merr.Success(), Progress: p, RefreshProgress: p}, nil
}

func (f *fakeMilvus) GetLoadState(ctx context.Context, req *milvuspb.GetLoadStateRequest) (*milvuspb.GetLoadStateResponse, error) {
	f.count("GetLoadState")
	f.mu.Lock()
	defer f.mu.Unlock()
	c, st := f.coll(req.CollectionName)
	if st != nil {
		return &milvuspb.GetLoadStateResponse{Status: st}, nil
	}
	s := commonpb.LoadState_LoadStateNotLoad
	if c.loaded {
		s = commonpb.LoadState_LoadStateLoaded
	}
	return &milvuspb.GetLoadStateResponse{Status: merr.Success(), State: s}, nil
}

func (f *fakeMilvus) Flush(ctx context.Context, req *milvuspb.FlushRequest) (*milvuspb.FlushResponse, error) {
	f.count("Flush")
	return &milvuspb.FlushResponse{Status: merr.Success()}, nil
}

// write applies columnar rows; upsert replaces, insert refuses duplicates.
func (f *fakeMilvus) write(name string, fields []*schemapb.FieldData, numRows uint32, upsert bool) (*schemapb.IDs, int64, *commonpb.Status) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, st := f.coll(name)
	if st != nil {
		return nil, 0, st
	}
	n := int(numRows)
	rows := make([]*fakeRow, n)
	for i := range rows {
		rows[i] = &fakeRow{strs: map[string]string{}}
	}
	seen := map[string]bool{}
	for _, fd := range fields {
		seen[fd.FieldName] = true
		switch fd.Type {
		case schemapb.DataType_VarChar:
			data := fd.GetScalars().GetStringData().GetData()
			if len(data) != n {
				return nil, 0, merr.Status(merr.WrapErrParameterInvalidMsg("field %s has %d rows, want %d", fd.FieldName, len(data), n))
			}
			for i, s := range data {
				rows[i].strs[fd.FieldName] = s
			}
		case schemapb.DataType_FloatVector:
			v := fd.GetVectors()
			data := v.GetFloatVector().GetData()
			if int(v.Dim) != c.dim || len(data) != n*c.dim {
				return nil, 0, merr.Status(merr.WrapErrParameterInvalidMsg("vector dim %d / %d floats, collection dim %d, %d rows", v.Dim, len(data), c.dim, n))
			}
			for i := range rows {
				rows[i].vec = append([]float32(nil), data[i*c.dim:(i+1)*c.dim]...)
			}
		default:
			return nil, 0, merr.Status(merr.WrapErrParameterInvalidMsg("fake: unsupported field type %v", fd.Type))
		}
	}
	for _, fs := range c.schema.Fields {
		if !seen[fs.Name] {
			return nil, 0, merr.Status(merr.WrapErrParameterInvalidMsg("field %s missing", fs.Name))
		}
	}
	ids := make([]string, n)
	for i, r := range rows {
		pk := r.strs[c.pkField]
		if _, dup := c.rows[pk]; dup && !upsert {
			return nil, 0, merr.Status(merr.WrapErrParameterInvalidMsg("duplicate primary key %q", pk))
		}
		c.rows[pk] = r
		ids[i] = pk
	}
	return &schemapb.IDs{IdField: &schemapb.IDs_StrId{StrId: &schemapb.StringArray{Data: ids}}}, int64(n), nil
}

func (f *fakeMilvus) Insert(ctx context.Context, req *milvuspb.InsertRequest) (*milvuspb.MutationResult, error) {
	f.count("Insert")
	ids, n, st := f.write(req.CollectionName, req.FieldsData, req.NumRows, false)
	if st != nil {
		return &milvuspb.MutationResult{Status: st}, nil
	}
	return &milvuspb.MutationResult{Status: merr.Success(), IDs: ids, InsertCnt: n}, nil
}

func (f *fakeMilvus) Upsert(ctx context.Context, req *milvuspb.UpsertRequest) (*milvuspb.MutationResult, error) {
	f.count("Upsert")
	ids, n, st := f.write(req.CollectionName, req.FieldsData, req.NumRows, true)
	if st != nil {
		return &milvuspb.MutationResult{Status: st}, nil
	}
	return &milvuspb.MutationResult{Status: merr.Success(), IDs: ids, UpsertCnt: n}, nil
}

func (f *fakeMilvus) Delete(ctx context.Context, req *milvuspb.DeleteRequest) (*milvuspb.MutationResult, error) {
	f.count("Delete")
	f.mu.Lock()
	defer f.mu.Unlock()
	f.exprs = append(f.exprs, req.Expr)
	c, st := f.coll(req.CollectionName)
	if st != nil {
		return &milvuspb.MutationResult{Status: st}, nil
	}
	pred, err := parseFakeExpr(req.Expr, c)
	if err != nil || req.Expr == "" {
		return &milvuspb.MutationResult{Status: merr.Status(merr.WrapErrParameterInvalidMsg("delete expr %q: %v", req.Expr, err))}, nil
	}
	var n int64
	for pk, r := range c.rows {
		if pred(r) {
			delete(c.rows, pk)
			n++
		}
	}
	return &milvuspb.MutationResult{Status: merr.Success(), DeleteCnt: n}, nil
}

func (f *fakeMilvus) Search(ctx context.Context, req *milvuspb.SearchRequest) (*milvuspb.SearchResults, error) {
	f.count("Search")
	f.mu.Lock()
	defer f.mu.Unlock()
	f.exprs = append(f.exprs, req.Dsl)
	fail := func(err error) (*milvuspb.SearchResults, error) {
		return &milvuspb.SearchResults{Status: merr.Status(err)}, nil
	}
	c, st := f.coll(req.CollectionName)
	if st != nil {
		return &milvuspb.SearchResults{Status: st}, nil
	}
	if !c.loaded {
		return fail(merr.WrapErrCollectionNotLoaded(req.CollectionName))
	}
	params := map[string]string{}
	for _, kv := range req.SearchParams {
		params[kv.Key] = kv.Value
	}
	if a := params["anns_field"]; a != "" && a != c.vecField {
		return fail(merr.WrapErrParameterInvalidMsg("anns_field %q", a))
	}
	topk, err := strconv.Atoi(params["topk"])
	if err != nil || topk <= 0 || topk > 16384 {
		return fail(merr.WrapErrParameterInvalidMsg("topk %q", params["topk"]))
	}
	offset, _ := strconv.Atoi(params["offset"])
	pred, err := parseFakeExpr(req.Dsl, c)
	if err != nil {
		return fail(merr.WrapErrParameterInvalidMsg("filter %q: %v", req.Dsl, err))
	}
	var phg commonpb.PlaceholderGroup
	if err := proto.Unmarshal(req.GetPlaceholderGroup(), &phg); err != nil || len(phg.Placeholders) != 1 {
		return fail(merr.WrapErrParameterInvalidMsg("placeholder group: %v", err))
	}
	ph := phg.Placeholders[0]
	if ph.Type != commonpb.PlaceholderType_FloatVector {
		return fail(merr.WrapErrParameterInvalidMsg("placeholder type %v", ph.Type))
	}
	res := &schemapb.SearchResultData{NumQueries: int64(len(ph.Values)), TopK: int64(topk)}
	var ids []string
	for _, raw := range ph.Values {
		if len(raw) != 4*c.dim {
			return fail(merr.WrapErrParameterInvalidMsg("query of %d bytes, dim %d", len(raw), c.dim))
		}
		q := make([]float32, c.dim)
		for i := range q {
			q[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		type hit struct {
			pk    string
			score float32
		}
		var hits []hit
		for pk, r := range c.rows {
			if pred(r) {
				hits = append(hits, hit{pk, fakeCosine(q, r.vec)})
			}
		}
		sort.Slice(hits, func(i, j int) bool {
			if hits[i].score != hits[j].score {
				return hits[i].score > hits[j].score
			}
			return hits[i].pk < hits[j].pk
		})
		if offset < len(hits) {
			hits = hits[offset:]
		} else {
			hits = nil
		}
		if len(hits) > topk {
			hits = hits[:topk]
		}
		res.Topks = append(res.Topks, int64(len(hits)))
		for _, h := range hits {
			ids = append(ids, h.pk)
			res.Scores = append(res.Scores, h.score)
		}
	}
	res.Ids = &schemapb.IDs{IdField: &schemapb.IDs_StrId{StrId: &schemapb.StringArray{Data: ids}}}
	return &milvuspb.SearchResults{Status: merr.Success(), Results: res, CollectionName: req.CollectionName}, nil
}

func fakeCosine(a, b []float32) float32 {
	var d, na, nb float64
	for i := range a {
		d += float64(a[i]) * float64(b[i])
		na += float64(a[i]) * float64(a[i])
		nb += float64(b[i]) * float64(b[i])
	}
	if na == 0 || nb == 0 {
		return 0
	}
	return float32(d / math.Sqrt(na*nb))
}

// parseFakeExpr parses the expression subset
//
//	expr := cond { ("&&" | "and") cond }
//	cond := field "==" string | field "in" "[" [string {"," string}] "]"
//
// over varchar fields, with Milvus string literals ("..." with \\ \" \' \n
// \r \t \f escapes). The empty expression matches every row.
func parseFakeExpr(s string, c *fakeCollection) (func(*fakeRow) bool, error) {
	p := &fakeParser{s: s}
	var conds []func(*fakeRow) bool
	p.space()
	if p.eof() {
		return func(*fakeRow) bool { return true }, nil
	}
	for {
		field := p.ident()
		if field == "" {
			return nil, fmt.Errorf("field name expected at %d", p.i)
		}
		known := false
		for _, fs := range c.schema.Fields {
			if fs.Name == field && fs.DataType == schemapb.DataType_VarChar {
				known = true
			}
		}
		if !known {
			return nil, fmt.Errorf("unknown varchar field %q", field)
		}
		p.space()
		switch {
		case p.take("=="):
			p.space()
			lit, err := p.literal()
			if err != nil {
				return nil, err
			}
			conds = append(conds, func(r *fakeRow) bool { return r.strs[field] == lit })
		case p.take("in"):
			p.space()
			if !p.take("[") {
				return nil, fmt.Errorf("'[' expected at %d", p.i)
			}
			set := map[string]bool{}
			p.space()
			for !p.take("]") {
				if len(set) > 0 {
					if !p.take(",") {
						return nil, fmt.Errorf("',' expected at %d", p.i)
					}
					p.space()
				}
				lit, err := p.literal()
				if err != nil {
					return nil, err
				}
				set[lit] = true
				p.space()
			}
			conds = append(conds, func(r *fakeRow) bool { return set[r.strs[field]] })
		default:
			return nil, fmt.Errorf("operator expected at %d", p.i)
		}
		p.space()
		if p.eof() {
			break
		}
		if !p.take("&&") && !p.take("and") {
			return nil, fmt.Errorf("'&&' expected at %d in %q", p.i, s)
		}
		p.space()
	}
	return func(r *fakeRow) bool {
		for _, c := range conds {
			if !c(r) {
				return false
			}
		}
		return true
	}, nil
}

type fakeParser struct {
	s string
	i int
}

func (p *fakeParser) eof() bool { return p.i >= len(p.s) }
func (p *fakeParser) space() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}
func (p *fakeParser) take(tok string) bool {
	if strings.HasPrefix(p.s[p.i:], tok) {
		p.i += len(tok)
		return true
	}
	return false
}
func (p *fakeParser) ident() string {
	j := p.i
	for j < len(p.s) && (p.s[j] == '_' || p.s[j] >= 'a' && p.s[j] <= 'z' || p.s[j] >= 'A' && p.s[j] <= 'Z' || j > p.i && p.s[j] >= '0' && p.s[j] <= '9') {
		j++
	}
	id := p.s[p.i:j]
	p.i = j
	return id
}

func (p *fakeParser) literal() (string, error) {
	if !p.take(`"`) {
		return "", fmt.Errorf("string literal expected at %d", p.i)
	}
	var b strings.Builder
	for {
		if p.eof() {
			return "", fmt.Errorf("unterminated string literal")
		}
		ch := p.s[p.i]
		switch ch {
		case '"':
			p.i++
			return b.String(), nil
		case '\\':
			if p.i+1 >= len(p.s) {
				return "", fmt.Errorf("dangling backslash")
			}
			e := p.s[p.i+1]
			p.i += 2
			switch e {
			case '\\', '"', '\'':
				b.WriteByte(e)
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'f':
				b.WriteByte('\f')
			default:
				return "", fmt.Errorf("unknown escape \\%c", e)
			}
		case '\n', '\r':
			return "", fmt.Errorf("raw newline in string literal")
		default:
			r, size := utf8.DecodeRuneInString(p.s[p.i:])
			b.WriteRune(r)
			p.i += size
		}
	}
}
