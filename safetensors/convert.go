package safetensors

import (
	"encoding/binary"
	"math"
	"sync"
	"unsafe"
)

// nativeLittleEndian is true on little-endian hosts, where an F32 tensor's
// bytes can be read straight into a []float32.
var nativeLittleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// float32Bytes views a []float32 as its bytes (no copy).
func float32Bytes(v []float32) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))
}

// F16ToFloat32 converts an IEEE 754 binary16 value to float32 exactly
// (subnormals, ±0, ±Inf; NaN keeps its sign and payload, shifted).
func F16ToFloat32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f: // Inf / NaN
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp != 0: // normal
		return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
	case mant == 0: // ±0
		return math.Float32frombits(sign)
	}
	// subnormal: mant × 2^-24; normalise into a float32 normal.
	e := uint32(127 - 15 + 1)
	for mant&0x400 == 0 {
		mant <<= 1
		e--
	}
	return math.Float32frombits(sign | e<<23 | (mant&0x3ff)<<13)
}

// Float32ToF16 converts to binary16 with round-to-nearest-even. Values
// beyond the half range become ±Inf, tiny ones round to subnormals or ±0,
// NaN stays a (quiet) NaN with the sign and top payload bits kept.
func Float32ToF16(v float32) uint16 {
	b := math.Float32bits(v)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant == 0 {
			return sign | 0x7c00
		}
		return sign | 0x7c00 | 0x200 | uint16(mant>>13)
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		if e < -10 {
			return sign // below half the smallest subnormal: rounds to ±0
		}
		m := mant | 0x800000 // 24-bit significand (input is normal here, exp ≥ 102)
		shift := uint32(14 - e)
		r := m >> shift
		rem := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && r&1 == 1) {
			r++
		}
		return sign | uint16(r)
	}
	r := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && r&1 == 1) {
		r++ // a carry into the exponent is correct, up to 0x7c00 = Inf
	}
	return sign | uint16(r)
}

// BF16ToFloat32 converts a bfloat16 value to float32 (exact: the high half).
func BF16ToFloat32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// Float32ToBF16 converts to bfloat16 with round-to-nearest-even; NaN stays
// a quiet NaN with its sign.
func Float32ToBF16(v float32) uint16 {
	b := math.Float32bits(v)
	if b&0x7f800000 == 0x7f800000 && b&0x7fffff != 0 {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

var (
	f16TableOnce sync.Once
	f16Table     *[65536]float32
)

func f16Lookup() *[65536]float32 {
	f16TableOnce.Do(func() {
		t := new([65536]float32)
		for i := range t {
			t[i] = F16ToFloat32(uint16(i))
		}
		f16Table = t
	})
	return f16Table
}

// F16BytesToFloat32 converts little-endian binary16 values in src into dst
// (len(dst) values; src must hold at least 2*len(dst) bytes).
func F16BytesToFloat32(dst []float32, src []byte) {
	t := f16Lookup()
	src = src[:2*len(dst)]
	if u := asUint16s(src); u != nil {
		for i, h := range u {
			dst[i] = t[h]
		}
		return
	}
	for i := range dst {
		dst[i] = t[binary.LittleEndian.Uint16(src[2*i:])]
	}
}

// BF16BytesToFloat32 converts little-endian bfloat16 values in src into
// dst (len(dst) values; src must hold at least 2*len(dst) bytes).
func BF16BytesToFloat32(dst []float32, src []byte) {
	src = src[:2*len(dst)]
	if u := asUint16s(src); u != nil {
		dst = dst[:len(u)]
		for i, h := range u {
			dst[i] = math.Float32frombits(uint32(h) << 16)
		}
		return
	}
	for i := range dst {
		dst[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(src[2*i:])) << 16)
	}
}

// asUint16s views b as native uint16s when that equals little-endian
// decoding (little-endian host, 2-byte aligned, even length); else nil.
func asUint16s(b []byte) []uint16 {
	if !nativeLittleEndian || len(b) == 0 || len(b)%2 != 0 || uintptr(unsafe.Pointer(&b[0]))%2 != 0 {
		return nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), len(b)/2)
}
