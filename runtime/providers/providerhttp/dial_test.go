package providerhttp

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// countingListener is a loopback listener that counts the connections it accepts and
// closes them at once.
func countingListener(t *testing.T) (string, *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	var n atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			_ = c.Close()
		}
	}()
	return ln.Addr().String(), &n
}

// closedPort is a loopback port nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// call sends one GET to target with c and maps its failure as adapters do.
func call(t *testing.T, c *http.Client, target string) *protocol.Error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := NewRequest(ctx, http.MethodGet, target, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return TransportError(ctx, "test", err)
	}
	_ = resp.Body.Close()
	return nil
}

// TestEndpointFenceRefusesBeforeAnyPacket: with loopback not allowed (the shared
// client's policy, cluster mode's), a provider call to a loopback, link-local,
// metadata, multicast or unspecified address — given as an IP or as a name resolving to
// one — fails as provider_rejected with one message whatever the address and port,
// before any connection: the loopback listener behind several of them never sees one.
func TestEndpointFenceRefusesBeforeAnyPacket(t *testing.T) {
	open, accepted := countingListener(t)
	_, openPort, _ := net.SplitHostPort(open)
	closed := closedPort(t)
	targets := []string{
		"http://" + open + "/v1/chat/completions",
		"http://" + closed + "/v1/chat/completions",
		"http://localhost:" + openPort + "/v1",
		"http://[::ffff:127.0.0.1]:" + openPort + "/",
		"http://0.0.0.0:" + openPort + "/",
		"http://[::]:" + openPort + "/",
		"http://169.254.169.254/latest/meta-data/",
		"http://169.254.169.254:6379/",
		"https://169.254.169.254/",
		"http://[fd00:ec2::254]/latest/meta-data/",
		"http://100.100.100.200/latest/meta-data/",
		"http://169.254.170.2/v2/credentials",
		"http://[::ffff:169.254.169.254]/",
		"http://[fe80::1]:8080/",
		"http://224.0.0.1/",
		"http://[ff02::1]/",
		"http://0.1.2.3/",
	}
	var first *protocol.Error
	for _, target := range targets {
		pe := call(t, Client(nil), target)
		if pe == nil {
			t.Errorf("GET %s succeeded, want it refused", target)
			continue
		}
		if pe.Code != protocol.CodeProviderRejected || pe.Retryable {
			t.Errorf("GET %s failed with %s retryable=%v (%s), want provider_rejected, not retryable", target, pe.Code, pe.Retryable, pe.Message)
			continue
		}
		if first == nil {
			first = pe
		} else if pe.Message != first.Message {
			t.Errorf("GET %s: message %q, want the same as every refusal: %q", target, pe.Message, first.Message)
		}
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("the loopback listener accepted %d connections, want none", n)
	}
	if first != nil {
		_, closedPortNumber, _ := net.SplitHostPort(closed)
		for _, leak := range []string{"127.0.0.1", "169.254", "localhost", openPort, closedPortNumber, strconv.Itoa(6379)} {
			if strings.Contains(first.Message, leak) {
				t.Errorf("the refusal %q names %q", first.Message, leak)
			}
		}
	}
}

// TestProviderCallsUseNoProxyFromTheEnvironment: the dial of a proxy named by
// HTTP(S)_PROXY would be the proxy's, and the proxy would reach for the runtime what
// the fence refuses; provider calls dial their endpoint themselves.
func TestProviderCallsUseNoProxyFromTheEnvironment(t *testing.T) {
	tr, ok := Client(nil).Transport.(*http.Transport)
	if !ok {
		t.Fatalf("the shared client's transport is a %T", Client(nil).Transport)
	}
	if tr.Proxy != nil {
		t.Error("the shared transport takes a proxy (from the environment)")
	}
}

// TestEndpointFenceAllowsLoopbackWhenAsked: with AllowLoopback (standalone mode), the
// loopback listener is reached by address and by name, and a closed loopback port is an
// ordinary connection failure.
func TestEndpointFenceAllowsLoopbackWhenAsked(t *testing.T) {
	open, accepted := countingListener(t)
	_, openPort, _ := net.SplitHostPort(open)
	c := NewClient(Fence{AllowLoopback: true})
	for _, target := range []string{"http://" + open + "/", "http://localhost:" + openPort + "/"} {
		// The listener closes every connection: the call fails after connecting.
		if pe := call(t, c, target); pe == nil || pe.Code != protocol.CodeProviderUnavailable {
			t.Errorf("GET %s = %v, want provider_unavailable from a connection closed by the server", target, pe)
		}
	}
	if n := accepted.Load(); n < 2 {
		t.Errorf("the loopback listener accepted %d connections, want 2", n)
	}
	if pe := call(t, c, "http://"+closedPort(t)+"/"); pe == nil || pe.Code != protocol.CodeProviderUnavailable || !pe.Retryable {
		t.Errorf("a closed loopback port = %v, want provider_unavailable, retryable", pe)
	}
	// Link-local stays refused.
	if pe := call(t, c, "http://169.254.169.254/"); pe == nil || pe.Message != RefusedMessage {
		t.Errorf("169.254.169.254 with loopback allowed = %v, want refused", pe)
	}
}

// TestEndpointFenceAllowsOtherInterfaces: an address of one of the host's own
// non-loopback interfaces (a private or public address, as a model server in the
// cluster has) is dialled under the strict fence.
func TestEndpointFenceAllowsOtherInterfaces(t *testing.T) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	var host string
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() && (Fence{}).Allows(p.Addr()) {
			host = p.Addr().String()
			break
		}
	}
	if host == "" {
		// No interface to listen on: dial a documentation address (TEST-NET-1) instead.
		// Nothing answers there, but the call must fail in the network (unreachable,
		// timed out), not be refused by the fence before it is tried.
		if pe := call(t, Client(nil), "http://192.0.2.1:9/"); pe == nil || pe.Message == RefusedMessage {
			t.Errorf("GET 192.0.2.1:9 = %v, want a network failure, not the fence's refusal", pe)
		}
		return
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	if pe := call(t, Client(nil), "http://"+ln.Addr().String()+"/"); pe != nil {
		t.Errorf("GET %s: %v, want it reached", ln.Addr(), pe)
	}
}

func TestFenceAllows(t *testing.T) {
	for _, tt := range []struct {
		addr          string
		strict, loose bool // without and with AllowLoopback
	}{
		{"10.0.0.7", true, true},
		{"172.16.3.4", true, true},
		{"192.168.1.10", true, true},
		{"100.64.0.1", true, true},
		{"fd12:3456::1", true, true},
		{"8.8.8.8", true, true},
		{"2001:db8::1", true, true},
		{"64:ff9b::808:808", true, true},
		{"127.0.0.1", false, true},
		{"127.1.2.3", false, true},
		{"::1", false, true},
		{"::ffff:127.0.0.1", false, true},
		{"64:ff9b::7f00:1", false, true},
		{"169.254.169.254", false, false},
		{"169.254.0.1", false, false},
		{"::ffff:169.254.169.254", false, false},
		{"64:ff9b::a9fe:a9fe", false, false},
		{"fe80::1", false, false},
		{"fe80::1%eth0", false, false},
		{"fd00:ec2::254", false, false},
		{"100.100.100.200", false, false},
		{"0.0.0.0", false, false},
		{"0.1.2.3", false, false},
		{"::", false, false},
		{"224.0.0.1", false, false},
		{"239.255.255.250", false, false},
		{"ff02::1", false, false},
		{"ff05::2", false, false},
	} {
		a := netip.MustParseAddr(tt.addr)
		if got := (Fence{}).Allows(a); got != tt.strict {
			t.Errorf("Fence{}.Allows(%s) = %v, want %v", tt.addr, got, tt.strict)
		}
		if got := (Fence{AllowLoopback: true}).Allows(a); got != tt.loose {
			t.Errorf("Fence{AllowLoopback}.Allows(%s) = %v, want %v", tt.addr, got, tt.loose)
		}
	}
}
