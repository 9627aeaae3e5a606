package safetensors

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

// refF16 is an independent reference for binary16 decoding, straight from
// the IEEE 754 definition: (-1)^s × 2^(e-15) × (1 + m/1024), subnormals
// (-1)^s × 2^-14 × m/1024, e = 31 Inf/NaN.
func refF16(h uint16) float64 {
	s := 1.0
	if h&0x8000 != 0 {
		s = -1
	}
	e := int(h>>10) & 0x1f
	m := float64(h & 0x3ff)
	switch e {
	case 0x1f:
		if m == 0 {
			return math.Inf(int(s))
		}
		return math.NaN()
	case 0:
		return s * math.Ldexp(m/1024, -14)
	}
	return s * math.Ldexp(1+m/1024, e-15)
}

func TestF16Hand(t *testing.T) {
	cases := []struct {
		h uint16
		v float64
	}{
		{0x3C00, 1}, {0xC000, -2}, {0x7C00, math.Inf(1)}, {0xFC00, math.Inf(-1)},
		{0x0001, math.Ldexp(1, -24)}, {0x03FF, 1023 * math.Ldexp(1, -24)}, {0x0400, math.Ldexp(1, -14)},
		{0x7BFF, 65504}, {0x3555, 0.333251953125}, {0x0000, 0}, {0x3800, 0.5}, {0xBC01, -1.0009765625},
	}
	for _, c := range cases {
		if got := F16ToFloat32(c.h); float64(got) != c.v {
			t.Errorf("F16ToFloat32(%#04x) = %v, want %v", c.h, got, c.v)
		}
		if got := Float32ToF16(float32(c.v)); got != c.h {
			t.Errorf("Float32ToF16(%v) = %#04x, want %#04x", c.v, got, c.h)
		}
	}
	if v := F16ToFloat32(0x8000); v != 0 || !math.Signbit(float64(v)) {
		t.Errorf("0x8000 = %v, want -0", v)
	}
	if v := F16ToFloat32(0x7E00); !math.IsNaN(float64(v)) {
		t.Errorf("0x7E00 = %v, want NaN", v)
	}
	if v := F16ToFloat32(0xFC01); !math.IsNaN(float64(v)) || !math.Signbit(float64(v)) {
		t.Errorf("0xFC01 = %v, want negative NaN", v)
	}
}

func TestF16Exhaustive(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		got := F16ToFloat32(h)
		want := refF16(h)
		if math.IsNaN(want) {
			if !math.IsNaN(float64(got)) || math.Signbit(float64(got)) != (h&0x8000 != 0) {
				t.Fatalf("F16ToFloat32(%#04x) = %v, want NaN with sign", h, got)
			}
			if back := Float32ToF16(got); back&0x7c00 != 0x7c00 || back&0x3ff == 0 || back&0x8000 != h&0x8000 {
				t.Fatalf("NaN %#04x round-trips to %#04x", h, back)
			}
			continue
		}
		if float64(got) != want || math.Signbit(float64(got)) != math.Signbit(want) {
			t.Fatalf("F16ToFloat32(%#04x) = %v, want %v", h, got, want)
		}
		if back := Float32ToF16(got); back != h {
			t.Fatalf("Float32ToF16(F16ToFloat32(%#04x)) = %#04x", h, back)
		}
	}
	// the table used by F16BytesToFloat32 agrees with the scalar function
	src := make([]byte, 2<<16)
	for i := 0; i < 1<<16; i++ {
		src[2*i], src[2*i+1] = byte(i), byte(i>>8)
	}
	dst := make([]float32, 1<<16)
	F16BytesToFloat32(dst, src)
	for i, v := range dst {
		if math.Float32bits(v) != math.Float32bits(F16ToFloat32(uint16(i))) {
			t.Fatalf("table[%#04x] = %v", i, v)
		}
	}
	// the same through the unaligned (byte-decoding) path, F16 and BF16
	odd := make([]byte, len(src)+1)
	copy(odd[1:], src)
	F16BytesToFloat32(dst, odd[1:])
	for i, v := range dst {
		if math.Float32bits(v) != math.Float32bits(F16ToFloat32(uint16(i))) {
			t.Fatalf("unaligned f16 %#04x = %v", i, v)
		}
	}
	for _, b := range [][]byte{src, odd[1:]} {
		BF16BytesToFloat32(dst, b)
		for i, v := range dst {
			if math.Float32bits(v) != uint32(i)<<16 {
				t.Fatalf("bf16 %#04x = %#08x", i, math.Float32bits(v))
			}
		}
	}
}

// refToF16 rounds x to the nearest binary16, ties to the even bit
// pattern, by searching the sorted list of representable magnitudes.
// 0x7C00 stands for 65536 (the next step past 65504), so values at or
// past 65520 round to Inf as IEEE requires.
func refToF16(x float32, mags []float64) uint16 {
	var sign uint16
	a := float64(x)
	if math.Signbit(a) {
		sign = 0x8000
		a = -a
	}
	if a >= 65536 {
		return sign | 0x7c00
	}
	i := sort.SearchFloat64s(mags, a) // first mags[i] >= a
	if mags[i] == a {
		return sign | uint16(i)
	}
	lo, hi := i-1, i
	dlo, dhi := a-mags[lo], mags[hi]-a
	switch {
	case dlo < dhi:
		return sign | uint16(lo)
	case dhi < dlo:
		return sign | uint16(hi)
	case lo%2 == 0:
		return sign | uint16(lo)
	}
	return sign | uint16(hi)
}

func f16Magnitudes() []float64 {
	mags := make([]float64, 0x7c01)
	for i := range 0x7c00 {
		mags[i] = refF16(uint16(i))
	}
	mags[0x7c00] = 65536
	return mags
}

func TestFloat32ToF16Rounding(t *testing.T) {
	mags := f16Magnitudes()
	check := func(x float32) {
		t.Helper()
		if got, want := Float32ToF16(x), refToF16(x, mags); got != want {
			t.Fatalf("Float32ToF16(%v = %#08x) = %#04x, want %#04x", x, math.Float32bits(x), got, want)
		}
	}
	// every midpoint between neighbours, and the float32 values either side
	for i := 0; i < 0x7c00; i++ {
		mid := float32((mags[i] + mags[i+1]) / 2) // exact: needs 12 significant bits
		for _, x := range []float32{mid, math.Nextafter32(mid, 0), math.Nextafter32(mid, math.MaxFloat32), float32(mags[i])} {
			check(x)
			check(-x)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		x := math.Float32frombits(rng.Uint32())
		if math.IsNaN(float64(x)) {
			continue
		}
		check(x)
	}
	// hand cases
	hand := []struct {
		x float32
		h uint16
	}{
		{65519.99, 0x7bff}, {65520, 0x7c00}, {1e10, 0x7c00}, {-1e10, 0xfc00},
		{1 + 1.0/2048, 0x3c00}, {1 + 3.0/2048, 0x3c02}, {float32(math.Ldexp(1, -25)), 0},
		{float32(math.Ldexp(1.0000001, -25)), 1}, {float32(math.Ldexp(3, -25)), 2}, {1e-30, 0},
		{float32(math.Ldexp(1023.5, -24)), 0x0400}, // rounds up out of the subnormals
	}
	for _, c := range hand {
		if got := Float32ToF16(c.x); got != c.h {
			t.Errorf("Float32ToF16(%v) = %#04x, want %#04x", c.x, got, c.h)
		}
	}
	if h := Float32ToF16(float32(math.NaN())); h&0x7c00 != 0x7c00 || h&0x3ff == 0 {
		t.Errorf("NaN -> %#04x", h)
	}
	if h := Float32ToF16(math.Float32frombits(0xff800001)); h != 0xfe00 {
		t.Errorf("signalling NaN with low payload -> %#04x, want quiet 0xfe00", h)
	}
}

// refToBF16 rounds by comparing distances to the two bf16 neighbours.
func refToBF16(x float32) uint16 {
	b := math.Float32bits(x)
	lo := b &^ 0xffff
	hi := lo + 0x10000
	a := math.Abs(float64(x))
	flo := math.Abs(float64(math.Float32frombits(lo)))
	var fhi float64
	if hi&0x7fffffff == 0x7f800000 {
		fhi = math.Ldexp(1, 128)
	} else {
		fhi = math.Abs(float64(math.Float32frombits(hi)))
	}
	dlo, dhi := a-flo, fhi-a
	switch {
	case dlo < dhi:
		return uint16(lo >> 16)
	case dhi < dlo:
		return uint16(hi >> 16)
	case (lo>>16)%2 == 0:
		return uint16(lo >> 16)
	}
	return uint16(hi >> 16)
}

func TestBF16(t *testing.T) {
	hand := []struct {
		h uint16
		v float64
	}{
		{0x3F80, 1}, {0xC000, -2}, {0x7F80, math.Inf(1)}, {0x4049, 3.140625}, {0x0001, math.Ldexp(1, -133)}, {0x3E80, 0.25},
	}
	for _, c := range hand {
		if got := BF16ToFloat32(c.h); float64(got) != c.v {
			t.Errorf("BF16ToFloat32(%#04x) = %v, want %v", c.h, got, c.v)
		}
		if got := Float32ToBF16(float32(c.v)); got != c.h {
			t.Errorf("Float32ToBF16(%v) = %#04x, want %#04x", c.v, got, c.h)
		}
	}
	round := []struct {
		x float32
		h uint16
	}{
		{1 + 1.0/256, 0x3F80}, {1 + 3.0/256, 0x3F82}, {1 + 1.0/256 + 1.0/(1<<20), 0x3F81},
		{math.MaxFloat32, 0x7F80}, {-math.MaxFloat32, 0xFF80}, {float32(math.Copysign(0, -1)), 0x8000},
	}
	for _, c := range round {
		if got := Float32ToBF16(c.x); got != c.h {
			t.Errorf("Float32ToBF16(%v) = %#04x, want %#04x", c.x, got, c.h)
		}
	}
	if h := Float32ToBF16(math.Float32frombits(0x7f800001)); h&0x7f80 != 0x7f80 || h&0x7f == 0 {
		t.Errorf("signalling NaN -> %#04x, want a NaN", h)
	}
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		v := BF16ToFloat32(h)
		if math.IsNaN(float64(v)) {
			continue
		}
		for _, x := range []float32{v, math.Float32frombits(math.Float32bits(v) | 0x8000), math.Float32frombits(math.Float32bits(v) | 0x7fff), math.Float32frombits(math.Float32bits(v) | 0x8001)} {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				continue
			}
			if got, want := Float32ToBF16(x), refToBF16(x); got != want {
				t.Fatalf("Float32ToBF16(%#08x) = %#04x, want %#04x", math.Float32bits(x), got, want)
			}
		}
		if Float32ToBF16(v) != h {
			t.Fatalf("bf16 %#04x does not round-trip", h)
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 200000 {
		x := math.Float32frombits(rng.Uint32())
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			continue
		}
		if got, want := Float32ToBF16(x), refToBF16(x); got != want {
			t.Fatalf("Float32ToBF16(%#08x) = %#04x, want %#04x", math.Float32bits(x), got, want)
		}
	}
}
