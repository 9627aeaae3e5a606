// Package kernels drives NVIDIA GPUs from Go without cgo: it dlopens the CUDA
// driver (libcuda), the run-time compiler (libnvrtc) and, when present, cuBLAS
// with purego, compiles the embedded CUDA C sources (*.cu) for the device's
// compute capability at first use (cached on disk), and launches them on a
// dedicated OS-thread-locked worker goroutine that owns the CUDA context.
//
// Without a GPU or the libraries every entry point returns an error wrapping
// ErrNoCUDA; nothing panics.
package kernels

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// Sentinel errors.
var (
	// ErrNoCUDA: no usable CUDA driver, device or run-time compiler here.
	ErrNoCUDA = errors.New("kernels: CUDA unavailable")
	// ErrCUDA: a CUDA driver, NVRTC or cuBLAS call failed.
	ErrCUDA = errors.New("kernels: CUDA call failed")
	// ErrCompile: NVRTC rejected a kernel source.
	ErrCompile = errors.New("kernels: kernel compilation failed")
	// ErrClosed: the device was closed.
	ErrClosed = errors.New("kernels: device closed")
	// ErrBadArg: a caller passed an invalid size, shape or pointer.
	ErrBadArg = errors.New("kernels: bad argument")
)

// LibDirEnv names an extra directory searched first for the CUDA libraries.
const LibDirEnv = "SPECGATE_CUDA_LIB_DIR"

// libDirs are the directories searched, after LibDirEnv and LD_LIBRARY_PATH.
func libDirs() []string {
	var dirs []string
	if d := os.Getenv(LibDirEnv); d != "" {
		dirs = append(dirs, d)
	}
	for _, d := range strings.Split(os.Getenv("LD_LIBRARY_PATH"), ":") {
		if d != "" {
			dirs = append(dirs, d)
		}
	}
	dirs = append(dirs, "/usr/local/nvidia/lib64", "/usr/local/nvidia/lib")
	if m, _ := filepath.Glob("/usr/local/cuda*/targets/x86_64-linux/lib"); len(m) > 0 {
		// Newest CUDA first (lexical order puts cuda-13.0 after cuda-12.x).
		for i := len(m) - 1; i >= 0; i-- {
			dirs = append(dirs, m[i])
		}
	}
	dirs = append(dirs, "/usr/local/cuda/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib")
	return dirs
}

// openLib dlopens the first of names found in the search directories, then
// by bare name (the dynamic loader's own search). It returns the path used.
func openLib(names ...string) (uintptr, string, error) {
	var errs []string
	for _, dir := range libDirs() {
		for _, n := range names {
			p := filepath.Join(dir, n)
			if _, err := os.Stat(p); err != nil {
				continue
			}
			h, err := purego.Dlopen(p, purego.RTLD_NOW|purego.RTLD_GLOBAL)
			if err == nil {
				return h, p, nil
			}
			errs = append(errs, err.Error())
		}
	}
	for _, n := range names {
		h, err := purego.Dlopen(n, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err == nil {
			return h, n, nil
		}
		errs = append(errs, err.Error())
	}
	return 0, "", fmt.Errorf("%s not found (searched %s, %s and the loader path): %s: %w",
		strings.Join(names, "|"), LibDirEnv, strings.Join(libDirs(), ":"), strings.Join(errs, "; "), ErrNoCUDA)
}

// sym is one resolved C function.
type sym uintptr

// call invokes the C function. Callers pass out-parameters as
// uintptr(unsafe.Pointer(&v)) directly in the call: uintptrescapes moves
// such v to the heap, so a stack growth during the call cannot leave the C
// side writing to a stale stack copy (seen as results silently lost).
//
//go:uintptrescapes
func (s sym) call(args ...uintptr) uintptr {
	r, _, _ := purego.SyscallN(uintptr(s), args...)
	return r
}

type libcuda struct {
	path                                                                 string
	cuInit, cuDeviceGet, cuDeviceGetAttribute, cuDeviceGetName           sym
	cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRelease, cuCtxSetCurrent sym
	cuMemAlloc, cuMemFree, cuMemAllocHost, cuMemFreeHost, cuMemGetInfo   sym
	cuMemcpyHtoDAsync, cuMemcpyDtoHAsync, cuMemcpyDtoDAsync              sym
	cuMemsetD32Async                                                     sym
	cuStreamCreate, cuStreamSynchronize, cuStreamDestroy                 sym
	cuModuleLoadData, cuModuleGetFunction, cuModuleUnload                sym
	cuFuncSetAttribute, cuLaunchKernel                                   sym
	cuStreamBeginCapture, cuStreamEndCapture, cuGraphInstantiate         sym
	cuGraphLaunch, cuGraphExecDestroy, cuGraphDestroy                    sym
	cuEventCreate, cuEventRecord, cuEventSynchronize, cuEventElapsedTime sym
	cuEventDestroy, cuGetErrorString, cuDriverGetVersion                 sym
	cuOccupancyMaxActiveBlocksPerMultiprocessor, cuFuncGetAttribute      sym
	cuLaunchKernelEx                                                     sym // optional (CUDA 12+): 0 when absent
}

type libnvrtc struct {
	path                                                          string
	nvrtcVersion, nvrtcCreateProgram, nvrtcCompileProgram         sym
	nvrtcGetProgramLogSize, nvrtcGetProgramLog, nvrtcGetCUBINSize sym
	nvrtcGetCUBIN, nvrtcGetPTXSize, nvrtcGetPTX                   sym
	nvrtcDestroyProgram, nvrtcGetErrorString                      sym
}

type libcublas struct {
	path                                                  string
	cublasCreate, cublasDestroy, cublasSetStream, gemmEx  sym
	cublasSetWorkspace, cublasGetVersion, cublasSetMathMd sym
}

var (
	libsOnce sync.Once
	libsErr  error
	cu       libcuda
	nvrtc    libnvrtc
	cublas   *libcublas // nil when libcublas is absent (GEMV fallback)
)

func resolve(h uintptr, lib string, table map[string]*sym) error {
	for name, p := range table {
		a, err := purego.Dlsym(h, name)
		if err != nil || a == 0 {
			return fmt.Errorf("%s: symbol %s missing: %w", lib, name, ErrNoCUDA)
		}
		*p = sym(a)
	}
	return nil
}

// loadLibs opens libcuda and libnvrtc (required) and libcublas (optional).
func loadLibs() error {
	libsOnce.Do(func() {
		h, p, err := openLib("libcuda.so.1", "libcuda.so")
		if err != nil {
			libsErr = err
			return
		}
		cu.path = p
		if err := resolve(h, p, map[string]*sym{
			"cuInit": &cu.cuInit, "cuDeviceGet": &cu.cuDeviceGet,
			"cuDeviceGetAttribute": &cu.cuDeviceGetAttribute, "cuDeviceGetName": &cu.cuDeviceGetName,
			"cuDevicePrimaryCtxRetain": &cu.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRelease_v2": &cu.cuDevicePrimaryCtxRelease,
			"cuCtxSetCurrent": &cu.cuCtxSetCurrent,
			"cuMemAlloc_v2":   &cu.cuMemAlloc, "cuMemFree_v2": &cu.cuMemFree,
			"cuMemAllocHost_v2": &cu.cuMemAllocHost, "cuMemFreeHost": &cu.cuMemFreeHost, "cuMemGetInfo_v2": &cu.cuMemGetInfo,
			"cuMemcpyHtoDAsync_v2": &cu.cuMemcpyHtoDAsync, "cuMemcpyDtoHAsync_v2": &cu.cuMemcpyDtoHAsync,
			"cuMemcpyDtoDAsync_v2": &cu.cuMemcpyDtoDAsync, "cuMemsetD32Async": &cu.cuMemsetD32Async,
			"cuStreamCreate": &cu.cuStreamCreate, "cuStreamSynchronize": &cu.cuStreamSynchronize,
			"cuStreamDestroy_v2": &cu.cuStreamDestroy,
			"cuModuleLoadData":   &cu.cuModuleLoadData, "cuModuleGetFunction": &cu.cuModuleGetFunction,
			"cuModuleUnload": &cu.cuModuleUnload, "cuFuncSetAttribute": &cu.cuFuncSetAttribute,
			"cuLaunchKernel": &cu.cuLaunchKernel, "cuStreamBeginCapture_v2": &cu.cuStreamBeginCapture,
			"cuStreamEndCapture": &cu.cuStreamEndCapture, "cuGraphInstantiateWithFlags": &cu.cuGraphInstantiate,
			"cuGraphLaunch": &cu.cuGraphLaunch, "cuGraphExecDestroy": &cu.cuGraphExecDestroy,
			"cuGraphDestroy": &cu.cuGraphDestroy, "cuEventCreate": &cu.cuEventCreate,
			"cuEventRecord": &cu.cuEventRecord, "cuEventSynchronize": &cu.cuEventSynchronize,
			"cuEventElapsedTime": &cu.cuEventElapsedTime, "cuEventDestroy_v2": &cu.cuEventDestroy,
			"cuGetErrorString": &cu.cuGetErrorString, "cuDriverGetVersion": &cu.cuDriverGetVersion,
			"cuOccupancyMaxActiveBlocksPerMultiprocessor": &cu.cuOccupancyMaxActiveBlocksPerMultiprocessor,
			"cuFuncGetAttribute":                          &cu.cuFuncGetAttribute,
		}); err != nil {
			libsErr = err
			return
		}
		if a, err := purego.Dlsym(h, "cuLaunchKernelEx"); err == nil && a != 0 {
			cu.cuLaunchKernelEx = sym(a)
		}
		if err := loadNVRTC(); err != nil {
			libsErr = err
			return
		}
		if h, p, err := openLib("libcublas.so.13", "libcublas.so.12", "libcublas.so"); err == nil {
			var b libcublas
			b.path = p
			if resolve(h, p, map[string]*sym{
				"cublasCreate_v2": &b.cublasCreate, "cublasDestroy_v2": &b.cublasDestroy,
				"cublasSetStream_v2": &b.cublasSetStream, "cublasGemmEx": &b.gemmEx,
				"cublasSetWorkspace_v2": &b.cublasSetWorkspace, "cublasGetVersion_v2": &b.cublasGetVersion,
				"cublasSetMathMode": &b.cublasSetMathMd,
			}) == nil {
				cublas = &b
			}
		}
	})
	return libsErr
}

var (
	nvrtcOnce sync.Once
	nvrtcErr  error
)

// loadNVRTC opens the run-time compiler alone (it needs no GPU).
func loadNVRTC() error {
	nvrtcOnce.Do(func() {
		h, p, err := openLib("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so")
		if err != nil {
			nvrtcErr = err
			return
		}
		nvrtc.path = p
		if err := resolve(h, p, map[string]*sym{
			"nvrtcVersion": &nvrtc.nvrtcVersion, "nvrtcCreateProgram": &nvrtc.nvrtcCreateProgram,
			"nvrtcCompileProgram": &nvrtc.nvrtcCompileProgram, "nvrtcGetProgramLogSize": &nvrtc.nvrtcGetProgramLogSize,
			"nvrtcGetProgramLog": &nvrtc.nvrtcGetProgramLog, "nvrtcGetCUBINSize": &nvrtc.nvrtcGetCUBINSize,
			"nvrtcGetCUBIN": &nvrtc.nvrtcGetCUBIN, "nvrtcGetPTXSize": &nvrtc.nvrtcGetPTXSize,
			"nvrtcGetPTX": &nvrtc.nvrtcGetPTX, "nvrtcDestroyProgram": &nvrtc.nvrtcDestroyProgram,
			"nvrtcGetErrorString": &nvrtc.nvrtcGetErrorString,
		}); err != nil {
			nvrtcErr = err
		}
	})
	return nvrtcErr
}

// cstring returns a NUL-terminated copy of s; keep the slice alive across the call.
func cstring(s string) []byte { return append([]byte(s), 0) }

// gostring copies a NUL-terminated C string.
func gostring(p uintptr) string {
	if p == 0 {
		return ""
	}
	var b []byte
	for i := 0; i < 4096; i++ {
		c := *(*byte)(cptr(p + uintptr(i)))
		if c == 0 {
			break
		}
		b = append(b, c)
	}
	return string(b)
}

// cuErr turns a CUresult into an error wrapping ErrCUDA, naming the call.
func cuErr(r uintptr, what string) error {
	if r == 0 {
		return nil
	}
	var s uintptr
	cu.cuGetErrorString.call(r, uintptr(unsafe.Pointer(&s)))
	return fmt.Errorf("%s: CUDA error %d (%s): %w", what, r, gostring(s), ErrCUDA)
}

// cptr converts an address of C (non-Go) memory to a pointer without
// tripping vet's uintptr check; never use it on Go heap addresses.
func cptr(p uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&p)) }
