package vecmath

// RowsQuery is an int8 query prepared for DotI8Rows: the vector, and for
// the AVX-512 VNNI kernel the same bytes biased by 128 as unsigned.
type RowsQuery struct {
	Q []int8
	u []uint8
}

// PrepRows prepares q for DotI8Rows (q is kept, not copied: do not modify
// it while the query is in use).
func PrepRows(q []int8) RowsQuery {
	rq := RowsQuery{Q: q}
	if useVNNI && len(q) >= 64 && len(q)%64 == 0 {
		rq.u = make([]uint8, len(q))
		for i, x := range q {
			rq.u[i] = uint8(x) ^ 0x80
		}
	}
	return rq
}

// PrepRowsInto is PrepRows with the biased copy in u (len(u) ≥ len(q)) when
// the kernel needs one, so a caller can reuse the buffer.
func PrepRowsInto(q []int8, u []uint8) RowsQuery {
	rq := RowsQuery{Q: q}
	if useVNNI && len(q) >= 64 && len(q)%64 == 0 {
		rq.u = u[:len(q)]
		for i, x := range q {
			rq.u[i] = uint8(x) ^ 0x80
		}
	}
	return rq
}

// DotI8Rows sets out[k] to DotI8(q.Q, arena[o:o+len(q.Q)]) with o =
// rows[k]·stride, for every k < len(rows) (the same int32s), asking for
// every row's lines first so that their cache misses overlap. It panics
// when a row lies outside arena or out is shorter than rows.
func DotI8Rows(q RowsQuery, arena []int8, stride int, rows []int32, out []int32) {
	n := len(q.Q)
	if len(out) < len(rows) {
		panic("vecmath: DotI8Rows out shorter than rows")
	}
	for _, r := range rows {
		if r < 0 || int(r)*stride+n > len(arena) {
			panic("vecmath: DotI8Rows row outside arena")
		}
	}
	if len(rows) == 0 || n == 0 {
		clear(out[:len(rows)])
		return
	}
	if q.u != nil {
		dotI8RowsVNNI(&q.u[0], &arena[0], stride, n, &rows[0], len(rows), &out[0])
		return
	}
	for _, r := range rows {
		o := int(r) * stride
		prefetchLines(&arena[o], n)
	}
	for k, r := range rows {
		o := int(r) * stride
		out[k] = dotI8(q.Q, arena[o:o+n:o+n])
	}
}
