package providerhttp

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/go-logr/logr"
)

// sharedClient is the client of adapters given none (WithHTTPClient): NewClient with
// the strict fence, loopback refused. The engine builds an adapter per attempt (so a
// rotated credential takes effect at the next one), and a client per attempt would throw
// away pooled connections.
var sharedClient = sync.OnceValue(func() *http.Client { return NewClient(Fence{}) })

// refuseRedirect keeps a 3xx as the response. An endpoint that redirects is
// misconfigured, and following it would resend the credential header elsewhere; the 3xx
// then maps to provider_rejected like any other unexpected status.
func refuseRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// Client returns the client an adapter sends its requests with: c when given (the
// binary's NewClient, a test's client), else the shared client, whose fence refuses
// loopback. A given client dials as its transport does: only NewClient's apply a Fence.
// Either way redirects are refused — c is copied shallowly, sharing its transport, with
// only the redirect policy replaced.
func Client(c *http.Client) *http.Client {
	if c == nil {
		return sharedClient()
	}
	cp := *c
	cp.CheckRedirect = refuseRedirect
	return &cp
}

// Logger returns the attempt's logger, which the engine puts in the attempt's context
// (naming the execution, attempt and deployment), else fallback (the zero Logger
// discards). Adapters log through it only identifiers (status, error type and code,
// request id): never a message, body, URL or credential.
func Logger(ctx context.Context, fallback logr.Logger) logr.Logger {
	if l, err := logr.FromContext(ctx); err == nil {
		return l
	}
	if fallback.GetSink() == nil {
		return logr.Discard()
	}
	return fallback
}

// HeaderSafe reports whether s can be sent as a header value as it is: visible ASCII,
// spaces allowed inside. A Secret value with a trailing newline is the usual way to get
// this wrong; adapters check at construction, so the failure is provider_rejected (an
// operator problem) rather than a send error that looks like an outage and is retried.
func HeaderSafe(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// BaseURL parses a deployment's endpoint (fallback when it is empty): an absolute
// http(s) URL with a host and no user information — a credential belongs in its header
// only. The fragment is dropped and the path keeps no trailing slash, so adapters append
// theirs with JoinPath; a query (which the CRD refuses, but a gateway in standalone mode
// may need, as Azure's api-version) is kept.
func BaseURL(endpoint, fallback string) (*url.URL, bool) {
	if endpoint == "" {
		endpoint = fallback
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
		return nil, false
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	u.Fragment, u.RawFragment = "", ""
	return u, true
}
