//go:build !amd64

package cpu

// Off amd64 the portable kernels run; the assembly entry points below are
// never called (useAVX2 is false).
var (
	useAVX2   = false
	useAVX512 = false
	hasF16C   = false
)

func dot2AVX2(w, x0, x1 *float32, n int) (float32, float32) { panic("engine: no AVX2 kernels") }
func axpyAVX2(y, x *float32, a float32, n int)              { panic("engine: no AVX2 kernels") }

func dotsAVX2(q, base *float32, slots *int32, n, stride, hd int, out *float32) {
	panic("engine: no AVX2 kernels")
}

func axpysAVX2(acc, base *float32, slots *int32, w *float32, n, stride, hd int) {
	panic("engine: no AVX2 kernels")
}

// No packed kernels off amd64 (newWmat packs nothing there).
var gemmTable512H, gemmTable512S, gemmTable256H, gemmTable256S, gemmTable512B, gemmTable256B gemmTable

var attnKernels512 [9]attnKernels

func expAVX512(x *float32, n int)                    { panic("engine: no AVX-512 kernels") }
func softmaxAVX512(x *float32, n int, scale float32) { panic("engine: no AVX-512 kernels") }
func siluMulAVX512(gate, up *float32, n int)         { panic("engine: no AVX-512 kernels") }
