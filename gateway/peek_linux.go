package gateway

import (
	"errors"
	"net"
	"syscall"
)

// peerClosed reports whether conn's peer has closed or reset it, without
// blocking and without consuming anything: a non-blocking MSG_PEEK of one
// byte that reads nothing (end of stream) or fails with anything but
// EAGAIN. Data waiting (a pipelined request) is not a hang-up. conn may be
// nil or have no file descriptor (then false), or wrap one (NetConn, as
// *tls.Conn does).
func peerClosed(conn net.Conn) bool {
	for conn != nil {
		if sc, ok := conn.(syscall.Conn); ok {
			rc, err := sc.SyscallConn()
			if err != nil {
				return false
			}
			closed := false
			_ = rc.Read(func(fd uintptr) bool {
				var b [1]byte
				for {
					n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
					if errors.Is(err, syscall.EINTR) {
						continue
					}
					closed = (err == nil && n == 0) || (err != nil && !errors.Is(err, syscall.EAGAIN))
					return true // never wait for readiness
				}
			})
			return closed
		}
		u, ok := conn.(interface{ NetConn() net.Conn })
		if !ok {
			return false
		}
		conn = u.NetConn()
	}
	return false
}
