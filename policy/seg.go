package policy

// seg is the bound of one segment of a segmented policy. A negative field
// means unbounded in that dimension; zero means no room at all.
type seg struct {
	maxEnt   int
	maxBytes int64
}

func (s seg) over(n int, b int64) bool {
	return (s.maxEnt >= 0 && n > s.maxEnt) || (s.maxBytes >= 0 && b > s.maxBytes)
}

// full reports whether a segment holding n keys of b bytes has reached its
// share (at or above the bound in a bounded dimension).
func (s seg) full(n int, b int64) bool {
	return (s.maxEnt >= 0 && n >= s.maxEnt) || (s.maxBytes >= 0 && b >= s.maxBytes)
}

// split cuts c into a part of share f (at least one entry or byte in each
// bounded dimension, at most all of it) and the rest. Unbounded dimensions
// stay unbounded in both.
func split(c Capacity, f float64) (part, rest seg) {
	part, rest = seg{-1, -1}, seg{-1, -1}
	if c.MaxEntries > 0 {
		part.maxEnt = min(c.MaxEntries, max(1, int(float64(c.MaxEntries)*f)))
		rest.maxEnt = c.MaxEntries - part.maxEnt
	}
	if c.MaxBytes > 0 {
		part.maxBytes = min(c.MaxBytes, max(1, int64(float64(c.MaxBytes)*f)))
		rest.maxBytes = c.MaxBytes - part.maxBytes
	}
	return part, rest
}

// splitSeg cuts a bounded segment s the same way.
func splitSeg(s seg, f float64) (part, rest seg) {
	part, rest = seg{-1, -1}, seg{-1, -1}
	if s.maxEnt >= 0 {
		part.maxEnt = min(s.maxEnt, max(1, int(float64(s.maxEnt)*f)))
		rest.maxEnt = s.maxEnt - part.maxEnt
	}
	if s.maxBytes >= 0 {
		part.maxBytes = min(s.maxBytes, max(1, int64(float64(s.maxBytes)*f)))
		rest.maxBytes = s.maxBytes - part.maxBytes
	}
	return part, rest
}
