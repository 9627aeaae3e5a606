package policy

import "math/bits"

// sketch is the TinyLFU frequency estimator: a count-min sketch of 4 rows of
// 4-bit saturating counters, in front of it a doorkeeper Bloom filter that
// absorbs the first access of each key, and aging that halves every counter
// (and clears the doorkeeper) after 10×width recorded accesses.
//
// estimate(h) is the sketch count plus one if the doorkeeper holds h: the
// number of recorded accesses of the key hashed to h, at most 16, halved
// (rounding down, doorkeeper bit dropped) by each aging, over-estimated only
// by hash collisions.
type sketch struct {
	rows     [4][]uint64 // width counters per row, 16 per word
	mask     uint64      // width-1
	door     []uint64    // doorkeeper bits
	doorMask uint64      // len(door)*64-1
	adds     int
	sample   int
}

const maxSketchWidth = 1 << 24

// newSketch sizes the sketch for about width distinct hot keys (rounded up to
// a power of two, at least 64, at most 2^24).
func newSketch(width int) *sketch {
	w := 64
	for w < width && w < maxSketchWidth {
		w <<= 1
	}
	s := &sketch{mask: uint64(w - 1), sample: 10 * w}
	for i := range s.rows {
		s.rows[i] = make([]uint64, w/16)
	}
	s.door = make([]uint64, w/2) // 32 bits per counter column
	s.doorMask = uint64(len(s.door)*64 - 1)
	return s
}

func (s *sketch) width() int { return int(s.mask + 1) }

// mix64 is the splitmix64 finaliser, used to derive a second hash.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

func (s *sketch) doorBits(h uint64) (uint64, uint64) {
	return h & s.doorMask, bits.RotateLeft64(h, 32) & s.doorMask
}

func (s *sketch) inDoor(h uint64) bool {
	a, b := s.doorBits(h)
	return s.door[a>>6]&(1<<(a&63)) != 0 && s.door[b>>6]&(1<<(b&63)) != 0
}

func (s *sketch) counter(i int, h, h2 uint64) (word int, shift uint) {
	idx := (h + uint64(i)*h2) & s.mask
	return int(idx >> 4), uint(idx&15) * 4
}

// increment records one access of the key hashed to h.
func (s *sketch) increment(h uint64) {
	s.adds++
	if !s.inDoor(h) {
		a, b := s.doorBits(h)
		s.door[a>>6] |= 1 << (a & 63)
		s.door[b>>6] |= 1 << (b & 63)
	} else {
		h2 := mix64(h) | 1
		for i := range s.rows {
			w, sh := s.counter(i, h, h2)
			if (s.rows[i][w]>>sh)&15 < 15 {
				s.rows[i][w] += 1 << sh
			}
		}
	}
	if s.adds >= s.sample {
		s.age()
	}
}

// estimate returns the recorded access count of h (doorkeeper included).
func (s *sketch) estimate(h uint64) int {
	h2 := mix64(h) | 1
	m := uint64(15)
	for i := range s.rows {
		w, sh := s.counter(i, h, h2)
		m = min(m, (s.rows[i][w]>>sh)&15)
	}
	if s.inDoor(h) {
		m++
	}
	return int(m)
}

// age halves all counters and clears the doorkeeper.
func (s *sketch) age() {
	for i := range s.rows {
		r := s.rows[i]
		for j := range r {
			r[j] = (r[j] >> 1) & 0x7777777777777777
		}
	}
	clear(s.door)
	s.adds /= 2
}
