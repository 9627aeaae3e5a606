package kernels

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

//go:embed *.cu
var sources embed.FS

// KernelCacheEnv overrides the directory of compiled kernels
// (default: the user cache dir + /specgate/kernels).
const KernelCacheEnv = "SPECGATE_KERNEL_CACHE"

// DevicePtr is a device address (CUdeviceptr). 0 is the null pointer.
type DevicePtr uintptr

// Dim3 is a grid or block shape.
type Dim3 struct{ X, Y, Z uint32 }

// Func is a loaded kernel (CUfunction).
type Func uintptr

// Device is one GPU with its primary context, one stream and the compiled
// kernel module. All CUDA work runs on a dedicated goroutine locked to its
// OS thread (CUDA contexts are per thread); Do marshals a function onto it.
// A Device is safe for concurrent use; calls are serialised.
type Device struct {
	Ordinal      int
	Name         string
	Major, Minor int // compute capability
	SMs          int
	MaxSmemOptin int    // bytes of dynamic shared memory a block may opt into
	Arch         string // e.g. "sm_90", what the kernels were built for
	DriverVer    int
	CacheHit     bool // the kernel binary came from the disk cache

	reqs    chan func()
	stopped chan struct{} // closed when the worker has released the context
	dead    atomic.Bool   // the worker exited inside a request (Goexit)
	mu      sync.Mutex
	closed  bool

	// Owned by the worker goroutine.
	dev    int32
	ctx    uintptr
	stream uintptr
	mod    uintptr
	funcs  map[string]Func
	blas   uintptr
	blasWS DevicePtr // cuBLAS workspace (cublasWorkspace bytes)
	args   [64]uint64
	argp   [64]uintptr
	pin    HostBuf // pinned staging for copies from and to Go memory
	c      Ctx
	pdl    bool       // launch PDL-aware kernels with programmatic stream serialization
	lcfg   launchCfg  // cuLaunchKernelEx config (heap, stable address)
	lattr  launchAttr // its one attribute
	// Split-attention scratch (see Ctx.Attention): partial results
	// [attnPartFloats] fp32 and per-(token, head) arrival counters
	// [attnCntInts] int32, zero between launches.
	attnPart, attnCnt DevicePtr
	fnames            map[Func]string // kernel names, for DebugLaunches errors
	capturing         bool            // between BeginCapture and EndCapture
	tune              Tuning          // defaults filled in (OpenTuned, Ctx.SetTuning)
	ringMaxBlocks     int             // when > 0, caps the ring GEMV grid (tests: many units per warp)
	// spin is tune.HandoffSpin, fixed when the device opens: Do's caller
	// reads it while the worker may be inside SetTuning, which writes tune.
	spin time.Duration
}

// launchCfg mirrors CUlaunchConfig (cuda.h, 64-bit): grid, block, shared
// memory bytes, stream, attribute array and count.
type launchCfg struct {
	gridX, gridY, gridZ    uint32
	blockX, blockY, blockZ uint32
	smem                   uint32
	_                      uint32
	stream                 uintptr
	attrs                  uintptr
	numAttrs               uint32
	_                      uint32
}

// launchAttr mirrors CUlaunchAttribute: a 4-byte id, 4 bytes of padding and
// a 64-byte value union.
type launchAttr struct {
	id    uint32
	_     uint32
	value [8]uint64
}

// cuLaunchAttributeProgrammaticStreamSerialization is
// CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION.
const cuLaunchAttributeProgrammaticStreamSerialization = 6

// PDLAvailable reports whether this device and driver can launch kernels
// with programmatic dependent launch (compute capability 9.0+, cuLaunchKernelEx
// present) and the device's Tuning.NoPDL is not set.
func (c *Ctx) PDLAvailable() bool {
	return c.d.Major >= 9 && cu.cuLaunchKernelEx != 0 && !c.d.tune.NoPDL
}

// SetPDL makes the PDL-aware launchers (Gemv, GemvQKVRope, RopeAppend,
// RopeAppendPerm, Attention, ArgmaxRows) launch with programmatic stream
// serialization while on (ignored when PDLAvailable is false), and returns
// the previous setting. Those kernels only read weights before waiting for
// their predecessor, so this is safe after any kernel or copy.
func (c *Ctx) SetPDL(on bool) bool {
	prev := c.d.pdl
	c.d.pdl = on && c.PDLAvailable()
	return prev
}

// launchPDL is Launch, with programmatic stream serialization when SetPDL is on.
func (c *Ctx) launchPDL(f Func, grid, block Dim3, smem int, args ...uint64) error {
	d := c.d
	if !d.pdl {
		return c.Launch(f, grid, block, smem, args...)
	}
	if len(args) > len(d.args) {
		return fmt.Errorf("launch: %d args: %w", len(args), ErrBadArg)
	}
	copy(d.args[:], args)
	d.lattr = launchAttr{id: cuLaunchAttributeProgrammaticStreamSerialization}
	d.lattr.value[0] = 1
	d.lcfg = launchCfg{gridX: grid.X, gridY: max(grid.Y, 1), gridZ: max(grid.Z, 1),
		blockX: block.X, blockY: max(block.Y, 1), blockZ: max(block.Z, 1), smem: uint32(smem),
		stream: d.stream, attrs: uintptr(unsafe.Pointer(&d.lattr)), numAttrs: 1}
	r := cu.cuLaunchKernelEx.call(uintptr(unsafe.Pointer(&d.lcfg)), uintptr(f), uintptr(unsafe.Pointer(&d.argp[0])), 0)
	if err := cuErr(r, "cuLaunchKernelEx"); err != nil {
		return err
	}
	return c.checkLaunch(c.funcName(f))
}

// launchByNamePDL is LaunchByName through launchPDL.
func (c *Ctx) launchByNamePDL(name string, grid, block Dim3, smem int, args ...uint64) error {
	f, err := c.Func(name)
	if err != nil {
		return err
	}
	if err := c.launchPDL(f, grid, block, smem, args...); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// Ctx is the view of a Device inside Do: its methods run CUDA calls directly
// and must only be called from the function passed to Do.
type Ctx struct{ d *Device }

// Open is OpenTuned with the default Tuning.
func Open(ordinal int) (*Device, error) { return OpenTuned(ordinal, Tuning{}) }

// OpenTuned initialises GPU ordinal with tuning t (zero values: defaults;
// an out-of-range knob is an error wrapping ErrBadArg), compiles (or loads
// from cache) the embedded kernels, and starts the worker. Errors wrap
// ErrNoCUDA when no driver, compiler or device is present.
func OpenTuned(ordinal int, t Tuning) (*Device, error) {
	t, err := t.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := loadLibs(); err != nil {
		return nil, err
	}
	d := &Device{Ordinal: ordinal, reqs: make(chan func(), 1), stopped: make(chan struct{}), funcs: map[string]Func{}, tune: t, spin: t.HandoffSpin}
	d.c = Ctx{d}
	for i := range d.argp {
		d.argp[i] = uintptr(unsafe.Pointer(&d.args[i]))
	}
	initErr := make(chan error, 1)
	go d.worker(initErr)
	if err := <-initErr; err != nil {
		return nil, err
	}
	return d, nil
}

func (d *Device) worker(initErr chan<- error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer close(d.stopped)
	if err := d.init(); err != nil {
		d.release()
		initErr <- err
		return
	}
	initErr <- nil
	// If a request ends the worker (runtime.Goexit inside Do), requests
	// already queued are answered with ErrClosed instead of never.
	defer func() {
		if d.dead.Load() {
			for {
				select {
				case f, ok := <-d.reqs:
					if !ok {
						return
					}
					f()
				default:
					return
				}
			}
		}
	}()
	for {
		f, ok := d.next()
		if !ok {
			break
		}
		f()
	}
	d.release()
}

// spinAllowed reports whether hand-off polling for spin (Tuning.HandoffSpin)
// may run now: spin > 0 and at least 4 Ps, so a polling worker and a
// polling caller leave the rest of the process room (with one P the
// caller could not even run to collect its result). The spinning costs a
// core only while requests keep coming.
func spinAllowed(spin time.Duration) bool { return spin > 0 && runtime.GOMAXPROCS(0) >= 4 }

// next returns the worker's next request (false once reqs is closed),
// polling for Tuning.HandoffSpin before blocking. The worker is locked to its
// thread: it must not yield (runtime.Gosched would hand its thread off).
func (d *Device) next() (func(), bool) {
	if spin := d.spin; spinAllowed(spin) {
		deadline := time.Now().Add(spin)
		for i := 0; ; i++ {
			select {
			case f, ok := <-d.reqs:
				return f, ok
			default:
			}
			if i&63 == 63 && time.Now().After(deadline) {
				break
			}
		}
	}
	f, ok := <-d.reqs
	return f, ok
}

func (d *Device) init() error {
	if r := cu.cuInit.call(0); r != 0 {
		return fmt.Errorf("cuInit (%s): %w", cuErr(r, "cuInit"), ErrNoCUDA)
	}
	var ver int32
	cu.cuDriverGetVersion.call(uintptr(unsafe.Pointer(&ver)))
	d.DriverVer = int(ver)
	if r := cu.cuDeviceGet.call(uintptr(unsafe.Pointer(&d.dev)), uintptr(d.Ordinal)); r != 0 {
		return fmt.Errorf("device %d: %v: %w", d.Ordinal, cuErr(r, "cuDeviceGet"), ErrNoCUDA)
	}
	attr := func(a int) int {
		var v int32
		cu.cuDeviceGetAttribute.call(uintptr(unsafe.Pointer(&v)), uintptr(a), uintptr(d.dev))
		return int(v)
	}
	d.Major, d.Minor, d.SMs, d.MaxSmemOptin = attr(75), attr(76), attr(16), attr(97)
	var name [256]byte
	cu.cuDeviceGetName.call(uintptr(unsafe.Pointer(&name[0])), 255, uintptr(d.dev))
	d.Name = strings.TrimRight(string(name[:]), "\x00")
	if r := cu.cuDevicePrimaryCtxRetain.call(uintptr(unsafe.Pointer(&d.ctx)), uintptr(d.dev)); r != 0 {
		return cuErr(r, "cuDevicePrimaryCtxRetain")
	}
	if r := cu.cuCtxSetCurrent.call(d.ctx); r != 0 {
		return cuErr(r, "cuCtxSetCurrent")
	}
	if r := cu.cuStreamCreate.call(uintptr(unsafe.Pointer(&d.stream)), 1 /* non-blocking */); r != 0 {
		return cuErr(r, "cuStreamCreate")
	}
	if r := cu.cuMemAllocHost.call(uintptr(unsafe.Pointer(&d.pin.ptr)), stageBytes); r != 0 {
		return cuErr(r, "cuMemAllocHost(staging)")
	}
	d.pin.size = stageBytes
	img, arch, hit, err := compileModule(d.Major, d.Minor, d.tune.KernelDefines)
	if err != nil {
		return err
	}
	d.Arch, d.CacheHit = arch, hit
	if r := cu.cuModuleLoadData.call(uintptr(unsafe.Pointer(&d.mod)), uintptr(unsafe.Pointer(&img[0]))); r != 0 {
		return cuErr(r, "cuModuleLoadData("+arch+")")
	}
	runtime.KeepAlive(img)
	var err2 error
	if d.attnPart, err2 = d.c.Alloc(attnPartFloats * 4); err2 != nil {
		return err2
	}
	if d.attnCnt, err2 = d.c.Alloc(attnCntInts * 4); err2 != nil {
		return err2
	}
	if err := d.c.Memset32(d.attnCnt, 0, attnCntInts); err != nil {
		return err
	}
	return d.c.Sync()
}

func (d *Device) release() {
	if d.ctx == 0 {
		return
	}
	if d.blas != 0 && cublas != nil {
		cublas.cublasDestroy.call(d.blas)
	}
	if d.blasWS != 0 {
		cu.cuMemFree.call(uintptr(d.blasWS))
	}
	if d.attnPart != 0 {
		cu.cuMemFree.call(uintptr(d.attnPart))
	}
	if d.attnCnt != 0 {
		cu.cuMemFree.call(uintptr(d.attnCnt))
	}
	if d.mod != 0 {
		cu.cuModuleUnload.call(d.mod)
	}
	if d.stream != 0 {
		cu.cuStreamDestroy.call(d.stream)
	}
	if d.pin.ptr != 0 {
		cu.cuMemFreeHost.call(d.pin.ptr)
	}
	cu.cuDevicePrimaryCtxRelease.call(uintptr(d.dev))
}

// Do runs f on the device's worker thread and returns its error.
func (d *Device) Do(f func(c *Ctx) error) error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return ErrClosed
	}
	done := make(chan error, 1)
	d.reqs <- func() {
		if d.dead.Load() { // drained after the worker ended
			done <- fmt.Errorf("kernels: the GPU worker has exited: %w", ErrClosed)
			return
		}
		finished := false
		defer func() {
			if finished {
				return
			}
			if r := recover(); r != nil {
				done <- fmt.Errorf("kernels: panic on the GPU worker: %v", r)
				return
			}
			// f called runtime.Goexit (e.g. t.Fatal): the worker is gone.
			d.dead.Store(true)
			d.mu.Lock()
			d.closed = true
			d.mu.Unlock()
			done <- fmt.Errorf("kernels: the GPU worker exited inside Do: %w", ErrClosed)
		}()
		err := f(&d.c)
		finished = true
		done <- err
	}
	d.mu.Unlock()
	if spin := d.spin; spinAllowed(spin) {
		deadline := time.Now().Add(spin)
		for i := 0; ; i++ {
			select {
			case err := <-done:
				return err
			default:
			}
			if i&15 == 15 && time.Now().After(deadline) {
				break
			}
			runtime.Gosched()
		}
	}
	return <-done
}

// Close stops the worker and releases the context's module and stream; it
// returns once they are released (so a following Open never races a
// release of the shared primary context). Device memory the caller
// allocated must be freed before.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	close(d.reqs)
	d.mu.Unlock()
	<-d.stopped
	return nil
}

// Device returns the device this context belongs to.
func (c *Ctx) Device() *Device { return c.d }

// Func returns the named kernel (extern "C" name in the .cu sources).
func (c *Ctx) Func(name string) (Func, error) {
	if f, ok := c.d.funcs[name]; ok {
		return f, nil
	}
	var f uintptr
	n := cstring(name)
	if r := cu.cuModuleGetFunction.call(uintptr(unsafe.Pointer(&f)), c.d.mod, uintptr(unsafe.Pointer(&n[0]))); r != 0 {
		return 0, cuErr(r, "cuModuleGetFunction("+name+")")
	}
	c.d.funcs[name] = Func(f)
	if c.d.fnames == nil {
		c.d.fnames = map[Func]string{}
	}
	c.d.fnames[Func(f)] = name
	return Func(f), nil
}

// DebugLaunches makes every kernel launch and graph replay outside stream
// capture wait for its completion and report an execution error (illegal
// address, trap, ...) with the kernel's name, instead of at a later
// synchronisation. On with SPECGATE_CUDA_DEBUG=1 or in builds with the
// cudadebug tag; it serialises the host with the GPU (slow).
var DebugLaunches = debugBuild || os.Getenv("SPECGATE_CUDA_DEBUG") == "1"

// checkLaunch is called after a successful launch of what (DebugLaunches).
func (c *Ctx) checkLaunch(what string) error {
	if !DebugLaunches || c.d.capturing {
		return nil
	}
	if err := c.Sync(); err != nil {
		return fmt.Errorf("kernels: %s failed on the device: %w", what, err)
	}
	return nil
}

// funcName is the kernel name of f (for errors).
func (c *Ctx) funcName(f Func) string {
	if n, ok := c.d.fnames[f]; ok {
		return n
	}
	return fmt.Sprintf("kernel %#x", uintptr(f))
}

// SetMaxDynamicSmem lets f use up to bytes of dynamic shared memory.
func (c *Ctx) SetMaxDynamicSmem(f Func, bytes int) error {
	return cuErr(cu.cuFuncSetAttribute.call(uintptr(f), 8, uintptr(bytes)), "cuFuncSetAttribute")
}

// BlocksPerSM is how many blocks of f with threads threads and smem bytes
// of dynamic shared memory fit on one SM at once (the occupancy calculator).
func (c *Ctx) BlocksPerSM(f Func, threads, smem int) (int, error) {
	n := new(int32) // heap: the driver writes it
	if err := cuErr(cu.cuOccupancyMaxActiveBlocksPerMultiprocessor.call(uintptr(unsafe.Pointer(n)), uintptr(f),
		uintptr(threads), uintptr(smem)), "cuOccupancyMaxActiveBlocksPerMultiprocessor"); err != nil {
		return 0, err
	}
	return int(*n), nil
}

// staticSmem is f's static shared memory in bytes
// (CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES), cached per kernel name.
func (c *Ctx) staticSmem(name string, f Func) (int, error) {
	key := name + "#static"
	if v, ok := c.d.funcs[key]; ok {
		return int(v), nil
	}
	n := new(int32)
	if err := cuErr(cu.cuFuncGetAttribute.call(uintptr(unsafe.Pointer(n)), 1, uintptr(f)), "cuFuncGetAttribute"); err != nil {
		return 0, fmt.Errorf("%s: static shared memory: %w", name, err)
	}
	c.d.funcs[key] = Func(*n)
	return int(*n), nil
}

// FuncRegisters is the registers per thread of f (CU_FUNC_ATTRIBUTE_NUM_REGS).
func (c *Ctx) FuncRegisters(f Func) (int, error) {
	n := new(int32)
	if err := cuErr(cu.cuFuncGetAttribute.call(uintptr(unsafe.Pointer(n)), 4, uintptr(f)), "cuFuncGetAttribute"); err != nil {
		return 0, err
	}
	return int(*n), nil
}

// Kernel argument encoders: every argument occupies one 8-byte slot; the
// driver reads as many bytes as the kernel's parameter has (little-endian).

// P encodes a device pointer argument.
func P(p DevicePtr) uint64 { return uint64(p) }

// I encodes an int (32-bit) argument.
func I(v int) uint64 { return uint64(uint32(int32(v))) }

// F encodes a float argument.
func F(v float32) uint64 { return uint64(math.Float32bits(v)) }

// Launch enqueues f on the stream. args are encoded with P, I, F.
func (c *Ctx) Launch(f Func, grid, block Dim3, smem int, args ...uint64) error {
	d := c.d
	if len(args) > len(d.args) {
		return fmt.Errorf("launch: %d args: %w", len(args), ErrBadArg)
	}
	copy(d.args[:], args)
	r := cu.cuLaunchKernel.call(uintptr(f), uintptr(grid.X), uintptr(max(grid.Y, 1)), uintptr(max(grid.Z, 1)),
		uintptr(block.X), uintptr(max(block.Y, 1)), uintptr(max(block.Z, 1)), uintptr(smem), d.stream,
		uintptr(unsafe.Pointer(&d.argp[0])), 0)
	if err := cuErr(r, "cuLaunchKernel"); err != nil {
		return err
	}
	return c.checkLaunch(c.funcName(f))
}

// LaunchByName is Launch with a kernel looked up by name.
func (c *Ctx) LaunchByName(name string, grid, block Dim3, smem int, args ...uint64) error {
	f, err := c.Func(name)
	if err != nil {
		return err
	}
	if err := c.Launch(f, grid, block, smem, args...); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// Alloc allocates bytes of device memory (uninitialised).
func (c *Ctx) Alloc(bytes int) (DevicePtr, error) {
	if bytes <= 0 {
		return 0, fmt.Errorf("alloc %d bytes: %w", bytes, ErrBadArg)
	}
	var p uintptr
	if r := cu.cuMemAlloc.call(uintptr(unsafe.Pointer(&p)), uintptr(bytes)); r != 0 {
		return 0, cuErr(r, fmt.Sprintf("cuMemAlloc(%d)", bytes))
	}
	return DevicePtr(p), nil
}

// Free releases device memory from Alloc; Free(0) is a no-op.
func (c *Ctx) Free(p DevicePtr) error {
	if p == 0 {
		return nil
	}
	return cuErr(cu.cuMemFree.call(uintptr(p)), "cuMemFree")
}

// MemInfo returns free and total device memory in bytes.
func (c *Ctx) MemInfo() (free, total int64) {
	var f, t uintptr
	cu.cuMemGetInfo.call(uintptr(unsafe.Pointer(&f)), uintptr(unsafe.Pointer(&t)))
	return int64(f), int64(t)
}

// HostBuf is page-locked host memory (cuMemAllocHost); its bytes stay valid
// until FreeHost.
type HostBuf struct {
	ptr  uintptr
	size int
}

// Bytes views the buffer.
func (h HostBuf) Bytes() []byte { return unsafe.Slice((*byte)(cptr(h.ptr)), h.size) }

// Ptr is the host address.
func (h HostBuf) Ptr() uintptr { return h.ptr }

// AllocHost allocates page-locked host memory.
func (c *Ctx) AllocHost(bytes int) (HostBuf, error) {
	var p uintptr
	if r := cu.cuMemAllocHost.call(uintptr(unsafe.Pointer(&p)), uintptr(bytes)); r != 0 {
		return HostBuf{}, cuErr(r, "cuMemAllocHost")
	}
	return HostBuf{p, bytes}, nil
}

// FreeHost releases a HostBuf.
func (c *Ctx) FreeHost(h HostBuf) error {
	if h.ptr == 0 {
		return nil
	}
	return cuErr(cu.cuMemFreeHost.call(h.ptr), "cuMemFreeHost")
}

// stageBytes is the size of the pinned staging buffer of each Device.
const stageBytes = 8 << 20

// HtoDRaw enqueues a copy of n bytes from pinned host memory src (a
// HostBuf's bytes) to dst. Go memory must go through Upload instead: the
// Go heap's address range can overlap the driver's unified address space,
// where the driver would take a Go address for a device one.
func (c *Ctx) HtoDRaw(dst DevicePtr, src unsafe.Pointer, n int) error {
	if n == 0 {
		return nil
	}
	return cuErr(cu.cuMemcpyHtoDAsync.call(uintptr(dst), uintptr(src), uintptr(n), c.d.stream), "cuMemcpyHtoDAsync")
}

// DtoHRaw enqueues a copy of n bytes from src to pinned host memory dst;
// complete after Sync.
func (c *Ctx) DtoHRaw(dst unsafe.Pointer, src DevicePtr, n int) error {
	if n == 0 {
		return nil
	}
	return cuErr(cu.cuMemcpyDtoHAsync.call(uintptr(dst), uintptr(src), uintptr(n), c.d.stream), "cuMemcpyDtoHAsync")
}

// copyIn copies n bytes of Go memory at src to dst through the pinned
// staging buffer, waiting for each chunk.
func (c *Ctx) copyIn(dst DevicePtr, src unsafe.Pointer, n int) error {
	stage := c.d.pin.Bytes()
	for off := 0; off < n; off += len(stage) {
		m := min(len(stage), n-off)
		copy(stage[:m], unsafe.Slice((*byte)(unsafe.Add(src, off)), m))
		if err := c.HtoDRaw(dst+DevicePtr(off), unsafe.Pointer(&stage[0]), m); err != nil {
			return err
		}
		if err := c.Sync(); err != nil {
			return err
		}
	}
	return nil
}

// copyOut copies n bytes from src to Go memory at dst through the staging buffer.
func (c *Ctx) copyOut(dst unsafe.Pointer, src DevicePtr, n int) error {
	stage := c.d.pin.Bytes()
	for off := 0; off < n; off += len(stage) {
		m := min(len(stage), n-off)
		if err := c.DtoHRaw(unsafe.Pointer(&stage[0]), src+DevicePtr(off), m); err != nil {
			return err
		}
		if err := c.Sync(); err != nil {
			return err
		}
		copy(unsafe.Slice((*byte)(unsafe.Add(dst, off)), m), stage[:m])
	}
	return nil
}

// DtoD copies n bytes between device buffers on the stream.
func (c *Ctx) DtoD(dst, src DevicePtr, n int) error {
	if n == 0 {
		return nil
	}
	return cuErr(cu.cuMemcpyDtoDAsync.call(uintptr(dst), uintptr(src), uintptr(n), c.d.stream), "cuMemcpyDtoDAsync")
}

// Memset32 fills n 32-bit words at dst with v.
func (c *Ctx) Memset32(dst DevicePtr, v uint32, n int) error {
	return cuErr(cu.cuMemsetD32Async.call(uintptr(dst), uintptr(v), uintptr(n), c.d.stream), "cuMemsetD32Async")
}

// Sync waits for all work on the stream.
func (c *Ctx) Sync() error {
	return cuErr(cu.cuStreamSynchronize.call(c.d.stream), "cuStreamSynchronize")
}

// Upload copies a host slice to dst (through pinned staging) and waits.
func Upload[T any](c *Ctx, dst DevicePtr, src []T) error {
	if len(src) == 0 {
		return nil
	}
	var z T
	err := c.copyIn(dst, unsafe.Pointer(&src[0]), len(src)*int(unsafe.Sizeof(z)))
	runtime.KeepAlive(src)
	return err
}

// Download copies len(dst) elements from src into dst and waits.
func Download[T any](c *Ctx, dst []T, src DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	var z T
	err := c.copyOut(unsafe.Pointer(&dst[0]), src, len(dst)*int(unsafe.Sizeof(z)))
	runtime.KeepAlive(dst)
	return err
}

// Graph is an instantiated CUDA graph (CUgraphExec).
type Graph struct{ exec, graph uintptr }

// BeginCapture starts recording the stream's work into a graph.
func (c *Ctx) BeginCapture() error {
	if err := cuErr(cu.cuStreamBeginCapture.call(c.d.stream, 1 /* thread-local */), "cuStreamBeginCapture"); err != nil {
		return err
	}
	c.d.capturing = true
	return nil
}

// EndCapture stops recording and instantiates the graph.
func (c *Ctx) EndCapture() (*Graph, error) {
	var g uintptr
	c.d.capturing = false
	if r := cu.cuStreamEndCapture.call(c.d.stream, uintptr(unsafe.Pointer(&g))); r != 0 {
		return nil, cuErr(r, "cuStreamEndCapture")
	}
	var e uintptr
	if r := cu.cuGraphInstantiate.call(uintptr(unsafe.Pointer(&e)), g, 0); r != 0 {
		cu.cuGraphDestroy.call(g)
		return nil, cuErr(r, "cuGraphInstantiate")
	}
	return &Graph{exec: e, graph: g}, nil
}

// LaunchGraph replays g on the stream.
func (c *Ctx) LaunchGraph(g *Graph) error {
	if err := cuErr(cu.cuGraphLaunch.call(g.exec, c.d.stream), "cuGraphLaunch"); err != nil {
		return err
	}
	return c.checkLaunch("graph replay")
}

// DestroyGraph frees g.
func (c *Ctx) DestroyGraph(g *Graph) {
	if g == nil {
		return
	}
	cu.cuGraphExecDestroy.call(g.exec)
	cu.cuGraphDestroy.call(g.graph)
}

// Event is a CUDA event for timing stream work.
type Event uintptr

// NewEvent creates an event (with timing).
func (c *Ctx) NewEvent() (Event, error) {
	var e uintptr
	if r := cu.cuEventCreate.call(uintptr(unsafe.Pointer(&e)), 0); r != 0 {
		return 0, cuErr(r, "cuEventCreate")
	}
	return Event(e), nil
}

// Record enqueues e on the stream.
func (c *Ctx) Record(e Event) error {
	return cuErr(cu.cuEventRecord.call(uintptr(e), c.d.stream), "cuEventRecord")
}

// ElapsedMs waits for b and returns the milliseconds between a and b.
func (c *Ctx) ElapsedMs(a, b Event) (float32, error) {
	if r := cu.cuEventSynchronize.call(uintptr(b)); r != 0 {
		return 0, cuErr(r, "cuEventSynchronize")
	}
	var ms float32
	if r := cu.cuEventElapsedTime.call(uintptr(unsafe.Pointer(&ms)), uintptr(a), uintptr(b)); r != 0 {
		return 0, cuErr(r, "cuEventElapsedTime")
	}
	return ms, nil
}

// DestroyEvent frees e.
func (c *Ctx) DestroyEvent(e Event) { cu.cuEventDestroy.call(uintptr(e)) }

// cublasWorkspace is the bytes of the cuBLAS handle's workspace (32 MB, as
// NVIDIA recommends for Hopper).
const cublasWorkspace = 32 << 20

// HasCUBLAS reports whether libcublas was found.
func HasCUBLAS() bool { return cublas != nil }

// GemmF16 computes, with cuBLAS (fp16 inputs, fp32 compute),
// Y[m][n] = alpha * sum_k X[m][k]*W[n][k] + beta*Y[m][n] for row-major
// W [N,K] fp16, X [M,K] fp16 and Y [M,N] fp32.
func (c *Ctx) GemmF16(w, x, y DevicePtr, M, N, K int, alpha, beta float32) error {
	if cublas == nil {
		return fmt.Errorf("cublas: %w", ErrNoCUDA)
	}
	d := c.d
	if d.blas == 0 {
		if r := cublas.cublasCreate.call(uintptr(unsafe.Pointer(&d.blas))); r != 0 {
			return fmt.Errorf("cublasCreate: status %d: %w", r, ErrCUDA)
		}
		if r := cublas.cublasSetStream.call(d.blas, d.stream); r != 0 {
			return fmt.Errorf("cublasSetStream: status %d: %w", r, ErrCUDA)
		}
		// A workspace of our own, so that cuBLAS allocates nothing inside
		// CUDA graph capture (batched steps are captured; engine/cuda).
		if cublas.cublasSetWorkspace != 0 {
			ws, err := c.Alloc(cublasWorkspace)
			if err != nil {
				return err
			}
			if r := cublas.cublasSetWorkspace.call(d.blas, uintptr(ws), cublasWorkspace); r != 0 {
				c.Free(ws)
				return fmt.Errorf("cublasSetWorkspace: status %d: %w", r, ErrCUDA)
			}
			d.blasWS = ws
		}
	}
	a, b := alpha, beta
	const opN, opT, r16F, r32F, compute32F = 0, 1, 2, 0, 68
	gemmDefault := ^uintptr(0) // CUBLAS_GEMM_DEFAULT = -1
	r := cublas.gemmEx.call(d.blas, opT, opN, uintptr(N), uintptr(M), uintptr(K),
		uintptr(unsafe.Pointer(&a)), uintptr(w), r16F, uintptr(K), uintptr(x), r16F, uintptr(K),
		uintptr(unsafe.Pointer(&b)), uintptr(y), r32F, uintptr(N), compute32F, gemmDefault)
	if r != 0 {
		return fmt.Errorf("cublasGemmEx(M=%d,N=%d,K=%d): status %d: %w", M, N, K, r, ErrCUDA)
	}
	return nil
}

// Source returns the concatenated kernel sources, in file-name order.
func Source() string {
	ents, _ := sources.ReadDir(".")
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		data, _ := sources.ReadFile(n)
		fmt.Fprintf(&b, "// ---- %s ----\n", n)
		b.Write(data)
		b.WriteByte('\n')
	}
	return b.String()
}

// Compile compiles the embedded sources for compute capability major.minor
// with NVRTC alone (no GPU needed), with the extra NVRTC options defines
// (Tuning.KernelDefines), and returns the image and the target ("sm_XY"
// cubin, or "compute_XY" PTX when NVRTC lacks the real target). The disk
// cache is used as in Open.
func Compile(major, minor int, defines ...string) (img []byte, arch string, err error) {
	if err := loadNVRTC(); err != nil {
		return nil, "", err
	}
	img, arch, _, err = compileModule(major, minor, defines)
	return img, arch, err
}

// cacheDir is where compiled kernels are kept.
func cacheDir() string {
	if d := os.Getenv(KernelCacheEnv); d != "" {
		return d
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "specgate", "kernels")
	}
	return filepath.Join(os.TempDir(), "specgate-kernels")
}

// compileModule returns a cubin (or PTX) image for compute capability
// major.minor with the extra options defines, from the disk cache when the
// same source, options and NVRTC version were compiled before.
func compileModule(major, minor int, defines []string) (img []byte, arch string, hit bool, err error) {
	var vmaj, vmin int32
	nvrtc.nvrtcVersion.call(uintptr(unsafe.Pointer(&vmaj)), uintptr(unsafe.Pointer(&vmin)))
	src := Source()
	type attempt struct {
		arch  string
		cubin bool
	}
	tries := []attempt{{fmt.Sprintf("sm_%d%d", major, minor), true}, {fmt.Sprintf("compute_%d%d", major, minor), false}}
	var errs []string
	for _, t := range tries {
		opts := []string{"--gpu-architecture=" + t.arch, "--std=c++17", "-default-device", "--fmad=true"}
		opts = append(opts, defines...)
		h := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%v\x00nvrtc%d.%d", src, opts, vmaj, vmin)))
		path := filepath.Join(cacheDir(), t.arch+"-"+hex.EncodeToString(h[:12])+map[bool]string{true: ".cubin", false: ".ptx"}[t.cubin])
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return b, t.arch, true, nil
		}
		b, err := nvrtcCompile(src, opts, t.cubin)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err == nil {
			tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
			if os.WriteFile(tmp, b, 0o644) == nil {
				_ = os.Rename(tmp, path)
			}
		}
		return b, t.arch, false, nil
	}
	return nil, "", false, fmt.Errorf("nvrtc %d.%d (%s): %s: %w", vmaj, vmin, nvrtc.path, strings.Join(errs, "\n"), ErrCompile)
}

func nvrtcCompile(src string, opts []string, cubin bool) ([]byte, error) {
	var prog uintptr
	csrc, cname := cstring(src), cstring("specgate.cu")
	if r := nvrtc.nvrtcCreateProgram.call(uintptr(unsafe.Pointer(&prog)), uintptr(unsafe.Pointer(&csrc[0])),
		uintptr(unsafe.Pointer(&cname[0])), 0, 0, 0); r != 0 {
		return nil, fmt.Errorf("nvrtcCreateProgram: status %d: %w", r, ErrCompile)
	}
	defer nvrtc.nvrtcDestroyProgram.call(uintptr(unsafe.Pointer(&prog)))
	copts := make([][]byte, len(opts))
	ptrs := make([]uintptr, len(opts))
	for i, o := range opts {
		copts[i] = cstring(o)
		ptrs[i] = uintptr(unsafe.Pointer(&copts[i][0]))
	}
	r := nvrtc.nvrtcCompileProgram.call(prog, uintptr(len(opts)), uintptr(unsafe.Pointer(&ptrs[0])))
	runtime.KeepAlive(copts)
	runtime.KeepAlive(csrc)
	if r != 0 {
		var n uintptr
		nvrtc.nvrtcGetProgramLogSize.call(prog, uintptr(unsafe.Pointer(&n)))
		log := make([]byte, n+1)
		nvrtc.nvrtcGetProgramLog.call(prog, uintptr(unsafe.Pointer(&log[0])))
		return nil, fmt.Errorf("%v: status %d: %s: %w", opts, r, strings.TrimRight(string(log), "\x00"), ErrCompile)
	}
	getSize, get := nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN
	if !cubin {
		getSize, get = nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX
	}
	var n uintptr
	if r := getSize.call(prog, uintptr(unsafe.Pointer(&n))); r != 0 || n == 0 {
		return nil, fmt.Errorf("nvrtc: get image size: status %d: %w", r, ErrCompile)
	}
	img := make([]byte, n+1) // PTX must be NUL-terminated; cubin ignores the extra byte
	if r := get.call(prog, uintptr(unsafe.Pointer(&img[0]))); r != 0 {
		return nil, fmt.Errorf("nvrtc: get image: status %d: %w", r, ErrCompile)
	}
	return img, nil
}
