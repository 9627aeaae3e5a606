//go:build cudadebug

package kernels

// debugBuild: built with the cudadebug tag, every launch is checked (DebugLaunches).
const debugBuild = true
