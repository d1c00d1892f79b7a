package kubeauth

import (
	"net/http"
	"net/netip"
	"sync"

	"golang.org/x/time/rate"
	"k8s.io/utils/lru"
)

// The per-address limit of failed authentications (spec/authentication.md, "Floods of
// bad tokens").
const (
	// DefaultFailureBurst is how many authentications a client address may fail in a
	// row before it is throttled (--auth-failures-per-address).
	DefaultFailureBurst = 20
	// failureRate is how fast a throttled address regains attempts: one a second.
	failureRate = rate.Limit(1)
	// maxAddresses bounds the addresses whose failures are remembered, the least
	// recently seen forgotten first: about 250 bytes each, 2.5 MB at most.
	maxAddresses = 10_000
)

// failureLimit throttles the client addresses that fail to authenticate: each has a
// token bucket of burst failures, refilled at failureRate. An authentication in
// progress counts as a failure until it has succeeded, so that concurrent requests of
// one address cannot all slip through before the first of them has failed.
type failureLimit struct {
	burst  int
	byAddr *lru.Cache // clientKey → *addressFailures
}

// addressFailures is the state of one client address.
type addressFailures struct {
	mu      sync.Mutex
	bucket  *rate.Limiter // one token per failure allowed
	pending int           // authentications in progress
}

func newFailureLimit(burst int) *failureLimit {
	return &failureLimit{burst: burst, byAddr: lru.New(maxAddresses)}
}

// attempt starts an authentication from r's client address, or returns nil when the
// address has no failure left to spend. The caller ends it with done.
func (f *failureLimit) attempt(r *http.Request) *addressFailures {
	key := clientKey(r.RemoteAddr)
	var a *addressFailures
	if v, ok := f.byAddr.Get(key); ok {
		a = v.(*addressFailures)
	} else {
		// Two first requests of an address at once may each add its state; one of
		// them wins, and the other's failure is not counted: one failure at most.
		a = &addressFailures{bucket: rate.NewLimiter(failureRate, f.burst)}
		f.byAddr.Add(key, a)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.bucket.Tokens() < float64(a.pending+1) {
		return nil
	}
	a.pending++
	return a
}

// done ends an authentication that attempt started; a failed one spends a failure.
func (a *addressFailures) done(failed bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pending--
	if failed {
		a.bucket.Allow()
	}
}

// clientKey is what the failures of r.RemoteAddr, the TCP peer's "host:port", are
// counted under: its IP address, or for IPv6 its /64, which a single host or pod often
// holds whole. Headers such as X-Forwarded-For are never read: any caller can set them.
// Behind a proxy every caller has the proxy's address and shares its limit.
func clientKey(remoteAddr string) any {
	ap, err := netip.ParseAddrPort(remoteAddr)
	if err != nil {
		return remoteAddr // not an IP peer (a test's or a Unix socket's): as it is
	}
	addr := ap.Addr().Unmap()
	if addr.Is4() {
		return addr
	}
	p, _ := addr.Prefix(64)
	return p
}
