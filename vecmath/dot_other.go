//go:build !amd64

package vecmath

// Off amd64 the portable loops run (useAVX2 is false).
var useAVX2 = false

func dotF32AVX2(a, b *float32, n int) float32 { panic("vecmath: no AVX2 kernels") }
func dotI8AVX2(a, b *int8, n int) int32       { panic("vecmath: no AVX2 kernels") }

func prefetchLines(p *int8, n int) {}

var useVNNI = false

func dotI8RowsVNNI(qu *uint8, base *int8, stride, n int, rows *int32, nrows int, out *int32) {
	panic("vecmath: no AVX-512 kernels")
}
