package providerhttp

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// Fence is the network policy of provider calls and token exchanges
// (spec/modeldeployments.md, "Endpoint"). A deployment's endpoint is written by whoever
// may create a ModelDeployment; without a fence it would let them reach, and map from
// the answers, whatever the runtime's pod can reach: the cloud's metadata service, the
// node's link-local services, the pod's own loopback listeners.
//
// The policy is applied by the dialer to the address actually connected to — after
// name resolution, before the socket sends anything — so a name that resolves to a
// refused address is refused too, and a refusal looks the same whatever the port.
type Fence struct {
	// AllowLoopback admits 127.0.0.0/8 and ::1: standalone mode, where the operator
	// writes the manifests and local model servers listen on loopback
	// (--allow-loopback-endpoints).
	AllowLoopback bool
}

// metadataAddrs are cloud metadata services outside the link-local range, which is
// refused as a whole (169.254.169.254 among it): AWS's IPv6 instance metadata and
// Alibaba Cloud's.
var metadataAddrs = map[netip.Addr]bool{
	netip.MustParseAddr("fd00:ec2::254"):   true,
	netip.MustParseAddr("100.100.100.200"): true,
}

// nat64 is the well-known NAT64 prefix (RFC 6052): an address in it reaches the IPv4
// address in its last four bytes.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// Allows reports whether a provider call may connect to addr: never to a link-local,
// cloud metadata, multicast or unspecified address (0.0.0.0/8 and :: reach the host
// itself), to loopback only when AllowLoopback is set, to anything else — private
// ranges included, where in-cluster model servers and VPC endpoints live — always.
// IPv4-mapped and NAT64 addresses are judged by the IPv4 address they reach.
func (f Fence) Allows(addr netip.Addr) bool {
	addr = addr.WithZone("")
	if nat64.Contains(addr) {
		b := addr.As16()
		addr = netip.AddrFrom4([4]byte(b[12:]))
	}
	addr = addr.Unmap()
	switch {
	case !addr.IsValid(), addr.IsUnspecified(), addr.IsMulticast(), addr.IsLinkLocalUnicast(),
		addr.IsLinkLocalMulticast(), addr.IsInterfaceLocalMulticast(), metadataAddrs[addr]:
		return false
	case addr.Is4() && addr.As4()[0] == 0:
		return false
	case addr.IsLoopback():
		return f.AllowLoopback
	}
	return true
}

// errRefused is the dialer's refusal. Its text is never surfaced: TransportError maps it
// to Refused.
var errRefused = errors.New("providerhttp: the address is refused by the endpoint fence")

// control is the dialer's Control hook: it runs for each address the dialer tries,
// after the socket is created and before it connects.
func (f Fence) control(_ context.Context, _, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil || !f.Allows(ap.Addr()) {
		return errRefused
	}
	return nil
}

// IsRefused reports whether err is, or wraps, a dial the fence refused.
func IsRefused(err error) bool { return errors.Is(err, errRefused) }

// RefusedMessage is the message of every fenced call: it names neither the address
// nor the port, so that refusals cannot be told apart.
const RefusedMessage = "the deployment's endpoint is an address the runtime does not connect to"

// Refused is the error of a call whose endpoint (or token endpoint) the fence refused:
// provider_rejected, an operator's configuration problem, not retryable.
func Refused(provider string) *protocol.Error {
	e := protocol.NewError(protocol.CodeProviderRejected, RefusedMessage)
	e.ProviderError = &protocol.ProviderError{Provider: provider}
	return e
}

// NewClient returns an HTTP client for provider calls whose every connection passes f,
// for a deployment's endpoint and a token endpoint alike (the binary builds one, from
// --allow-loopback-endpoints, and gives it to every adapter).
//
// It bounds connecting, TLS and idle time but sets no overall timeout and no
// response-header timeout — a non-streaming answer arrives only when the model has
// finished — so the attempt's context (cancellation, execution deadline, the
// deployment's attemptTimeout) governs how long a call runs. Keep-alive connections are
// pooled generously per host: a gateway sends many concurrent calls to few hosts, and a
// TLS handshake per call would dominate the added latency (spec/performance.md).
//
// It takes no proxy from the environment (HTTP_PROXY, HTTPS_PROXY): through a proxy the
// dial is the proxy's, the fence would see only the proxy's address, and the proxy would
// reach for the runtime what the fence refuses. Egress control belongs to the network
// (a NetworkPolicy, a transparent egress gateway). Redirects are refused (see Client).
func NewClient(f Fence) *http.Client {
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second, ControlContext: f.control}
	return &http.Client{
		Transport: &http.Transport{
			DialContext:           dialer.DialContext,
			ForceAttemptHTTP2:     true,
			TLSHandshakeTimeout:   10 * time.Second,
			ExpectContinueTimeout: time.Second,
			IdleConnTimeout:       90 * time.Second,
			MaxIdleConns:          256,
			MaxIdleConnsPerHost:   64,
		},
		CheckRedirect: refuseRedirect,
	}
}
