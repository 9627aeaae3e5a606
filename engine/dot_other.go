//go:build !amd64

package engine

// Off amd64 the portable kernels run; the assembly entry points below are
// never called (useAVX2 is false).
var (
	useAVX2   = false
	useAVX512 = false
	hasF16C   = false
)

func dotAVX2(a, b *float32, n int) float32                  { panic("engine: no AVX2 kernels") }
func dot2AVX2(w, x0, x1 *float32, n int) (float32, float32) { panic("engine: no AVX2 kernels") }
func dotAVX2H(w *uint16, x *float32, n int) float32         { panic("engine: no AVX2 kernels") }
func dot2AVX2H(w *uint16, x0, x1 *float32, n int) (float32, float32) {
	panic("engine: no AVX2 kernels")
}
func axpyAVX2(y, x *float32, a float32, n int) { panic("engine: no AVX2 kernels") }

func dot4AVX512H(w *uint16, x *float32, stride, n int, out *float32) {
	panic("engine: no AVX-512 kernels")
}

func dotsAVX2(q, base *float32, slots *int32, n, stride, hd int, out *float32) {
	panic("engine: no AVX2 kernels")
}

func axpysAVX2(acc, base *float32, slots *int32, w *float32, n, stride, hd int) {
	panic("engine: no AVX2 kernels")
}
