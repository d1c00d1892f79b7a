//go:build !unix

package httpapi_test

import "net"

// dialSmallWindow falls back to a plain connection where socket options before the
// handshake are not available; the stalled-reader test then needs more data to stall.
func dialSmallWindow(addr string) (net.Conn, error) {
	return net.Dial("tcp", addr)
}
