//go:build unix

package httpapi_test

import (
	"net"
	"syscall"
)

// dialSmallWindow connects with a tiny receive buffer, set before the handshake so that
// the window the peer may fill is tiny from the start.
func dialSmallWindow(addr string) (net.Conn, error) {
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var err error
		if cerr := c.Control(func(fd uintptr) {
			err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 2048)
		}); cerr != nil {
			return cerr
		}
		return err
	}}
	return d.Dial("tcp", addr)
}
