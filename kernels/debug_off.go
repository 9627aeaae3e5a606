//go:build !cudadebug

package kernels

// debugBuild: built without the cudadebug tag (DebugLaunches follows SPECGATE_CUDA_DEBUG).
const debugBuild = false
