//go:build !linux

package gateway

import "net"

// peerClosed is Linux only (a non-blocking MSG_PEEK); elsewhere a hang-up
// does not end a buffered upstream call's retries.
func peerClosed(net.Conn) bool { return false }
