package cpu

// Int8 returns the values of a matrix made by NewMatI8: q [Rows][Cols],
// row-major, unpacked from the kernels' panels into a new slice, and the
// per-row scales (aliased: do not modify). ok is false for a float32
// matrix. For a caller that needs the weights in another layout only now
// and then (Medusa heads uploaded to a GPU), so that it need not keep its
// own copy beside the packed one.
func (m *Mat) Int8() (q []int8, scale []float32, ok bool) {
	w := m.w.i8
	if w == nil {
		return nil, nil, false
	}
	q = make([]int8, w.out*w.in)
	for o := range w.out {
		base := (o/16)*w.in*16 + o%16
		row := q[o*w.in : (o+1)*w.in]
		for k := range row {
			row[k] = w.panels[base+k*16]
		}
	}
	return q, w.scale, true
}
