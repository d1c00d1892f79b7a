package gemini

import (
	"context"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"
	"golang.org/x/sync/singleflight"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/providerhttp"
)

// vertexScope is the OAuth scope of Vertex AI's generateContent.
const vertexScope = "https://www.googleapis.com/auth/cloud-platform"

// Bounds of the token cache. The engine builds an adapter per attempt, so the token
// source of a service account key must outlive the adapter, or every attempt would mint
// a token. Keys that stop being used (a rotated Secret) age out after tokenSourceIdle;
// maxTokenSources bounds the cache whatever the number of deployments.
const (
	maxTokenSources = 64
	tokenSourceIdle = time.Hour
	// tokenFetchTimeout bounds one token request. The oauth2 library sends it without
	// the attempt's context, so the client's timeout is what ends a hung token endpoint;
	// the attempts waiting for it stop waiting when their own contexts end.
	tokenFetchTimeout = 30 * time.Second
	// tokenMargin is how long before its expiry a cached token stops being used without
	// asking the token source.
	tokenMargin = time.Minute
)

// vertexTokens is the process's token cache, shared by every vertex adapter.
var vertexTokens = &tokenCache{entries: map[[sha256.Size]byte]*tokenEntry{}, now: time.Now}

// tokenCache holds one token source per service account key, keyed by the SHA-256 of the
// key's JSON: the key itself is never a map key, and a rotated Secret (new key content)
// gets a new entry, so its first attempt mints a token with the new key.
type tokenCache struct {
	mu      sync.Mutex
	entries map[[sha256.Size]byte]*tokenEntry
	now     func() time.Time
}

// tokenEntry is one key's token source. An adapter keeps its entry for its attempt even
// if the cache drops it meanwhile.
type tokenEntry struct {
	sum [sha256.Size]byte
	// src is the service account's token source as the google package builds it: it
	// already reuses its token until shortly before expiry (jwt.Config.TokenSource is an
	// oauth2.ReuseTokenSource), so it is not wrapped again.
	src   oauth2.TokenSource
	keyID string // private_key_id, to scrub echoes of it
	// fenced notes a token request the endpoint fence refused: the oauth2 library
	// reports transport errors as text only.
	fenced *fenceWitness
	// last is the token src last returned, read without calling src on the hot path.
	last atomic.Pointer[oauth2.Token]
	// fetch lets at most one call of src run at a time for this key: attempts that find
	// no valid token join the fetch in flight instead of each starting one that would
	// outlive them (src serializes its fetches, so they would pile up behind a hung
	// token endpoint).
	fetch singleflight.Group
	// lastUsed is guarded by the cache's mu.
	lastUsed time.Time
}

// entry returns the token source for the service account key keyJSON, creating it on
// first use with client (through the oauth2.HTTPClient context key, so token requests
// take the adapter's transport and proxy). ok is false when keyJSON is not a usable
// service account key. Nothing is fetched here.
func (c *tokenCache) entry(keyJSON string, client *http.Client) (*tokenEntry, bool) {
	sum := sha256.Sum256([]byte(keyJSON))
	now := c.now()
	c.mu.Lock()
	if e, ok := c.entries[sum]; ok {
		e.lastUsed = now
		c.mu.Unlock()
		return e, true
	}
	c.mu.Unlock()

	key, ok := parseServiceAccountKey([]byte(keyJSON))
	if !ok {
		return nil, false
	}
	tc := *client
	tc.Timeout = tokenFetchTimeout
	fenced := &fenceWitness{base: tc.Transport}
	if fenced.base == nil {
		fenced.base = http.DefaultTransport
	}
	tc.Transport = fenced
	ctx := context.WithValue(context.Background(), oauth2.HTTPClient, &tc)
	creds, err := google.CredentialsFromJSONWithType(ctx, []byte(keyJSON), google.ServiceAccount, vertexScope)
	if err != nil {
		return nil, false
	}
	e := &tokenEntry{sum: sum, src: creds.TokenSource, keyID: key.PrivateKeyID, fenced: fenced, lastUsed: now}

	c.mu.Lock()
	defer c.mu.Unlock()
	if prev, ok := c.entries[sum]; ok {
		// A concurrent attempt created it first; share its token.
		prev.lastUsed = now
		return prev, true
	}
	c.evict(now)
	c.entries[sum] = e
	return e, true
}

// evict drops entries unused for tokenSourceIdle, then the least recently used ones
// until there is room for one more. The caller holds mu.
func (c *tokenCache) evict(now time.Time) {
	for sum, e := range c.entries {
		if now.Sub(e.lastUsed) > tokenSourceIdle {
			delete(c.entries, sum)
		}
	}
	for len(c.entries) >= maxTokenSources {
		var oldest *tokenEntry
		for _, e := range c.entries {
			if oldest == nil || e.lastUsed.Before(oldest.lastUsed) {
				oldest = e
			}
		}
		delete(c.entries, oldest.sum)
	}
}

// forget drops e, so that the next attempt with its key mints a new token.
func (c *tokenCache) forget(e *tokenEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries[e.sum] == e {
		delete(c.entries, e.sum)
	}
}

// token returns an access token for the attempt. A cached token is returned at once;
// otherwise the attempt joins the entry's one fetch in flight (starting it if there is
// none) and stops waiting when ctx ends. The fetch itself is bounded by
// tokenFetchTimeout, not by any attempt's context, and its token is cached for the
// attempts after it even when every waiter has left. Failures have fixed messages: the
// oauth2 error text can hold the token endpoint's response body and is never surfaced or
// logged.
func (e *tokenEntry) token(ctx context.Context, provider string, log logr.Logger) (string, *protocol.Error) {
	if t := e.last.Load(); t != nil && time.Until(t.Expiry) > tokenMargin {
		return t.AccessToken, nil
	}
	done := e.fetch.DoChan("", func() (any, error) {
		e.fenced.refused.Store(false)
		t, err := e.src.Token()
		if err != nil && e.fenced.refused.Load() {
			err = errTokenURIFenced
		}
		if err == nil && t != nil && t.AccessToken != "" && providerhttp.HeaderSafe(t.AccessToken) && !t.Expiry.IsZero() {
			e.last.Store(t)
		}
		return t, err
	})
	select {
	case r := <-done:
		if r.Err != nil {
			return "", tokenFailure(ctx, provider, r.Err, log)
		}
		tok, _ := r.Val.(*oauth2.Token)
		if tok == nil || tok.AccessToken == "" || !providerhttp.HeaderSafe(tok.AccessToken) {
			log.Info("Provider token endpoint answered without a usable access token")
			return "", tokenUnavailable(provider)
		}
		return tok.AccessToken, nil
	case <-ctx.Done():
		return "", providerhttp.TransportError(ctx, provider, ctx.Err())
	}
}

// fenceWitness is the token requests' transport: base, noting a request whose dial the
// endpoint fence refused (spec/modeldeployments.md, "Endpoint"). The oauth2 library
// turns transport errors into text, so the refusal would otherwise look like an outage.
// An entry's fetches run one at a time (tokenEntry.fetch), each resetting it first.
type fenceWitness struct {
	base    http.RoundTripper
	refused atomic.Bool
}

func (w *fenceWitness) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := w.base.RoundTrip(r)
	if providerhttp.IsRefused(err) {
		w.refused.Store(true)
	}
	return resp, err
}

// errTokenURIFenced is a token request the endpoint fence refused.
var errTokenURIFenced = errors.New("gemini: the token endpoint is refused by the endpoint fence")

// tokenFailure maps a failed token request: a token_uri the endpoint fence refuses is
// the fence's provider_rejected, the same as for a model endpoint; a 4xx from the token
// endpoint (other than 408 and 429) means the key was refused — revoked, disabled, or
// for another audience — which is an operator problem and provider_rejected; anything
// else (5xx, a network failure, an unreadable answer) is provider_unavailable and
// retryable.
func tokenFailure(ctx context.Context, provider string, err error, log logr.Logger) *protocol.Error {
	status := 0
	var re *oauth2.RetrieveError
	if errors.As(err, &re) && re.Response != nil {
		status = re.Response.StatusCode
	}
	fenced := errors.Is(err, errTokenURIFenced)
	log.Info("Provider token request failed", "status", status, "fenced", fenced, "contextDone", ctx.Err() != nil)
	switch {
	case fenced:
		return providerhttp.Refused(provider)
	case ctx.Err() != nil:
		return providerhttp.TransportError(ctx, provider, err)
	case status >= 400 && status < 500 && status != http.StatusRequestTimeout && status != http.StatusTooManyRequests:
		e := protocol.NewError(protocol.CodeProviderRejected, "the token endpoint refused the deployment's service account key")
		e.ProviderError = &protocol.ProviderError{Provider: provider}
		return e
	}
	return tokenUnavailable(provider)
}

func tokenUnavailable(provider string) *protocol.Error {
	e := protocol.NewError(protocol.CodeProviderUnavailable, "the token endpoint could not be reached")
	e.ProviderError = &protocol.ProviderError{Provider: provider}
	return e
}

// serviceAccountKey holds the fields of a Google service account key file that are
// checked before the key is used.
type serviceAccountKey struct {
	Type         string `json:"type"`
	ClientEmail  string `json:"client_email"`
	PrivateKey   string `json:"private_key"`
	PrivateKeyID string `json:"private_key_id"`
	TokenURI     string `json:"token_uri"`
}

// parseServiceAccountKey accepts a service account key file only: type
// "service_account", a client email, an RSA private key in PEM (PKCS #8 or PKCS #1), and
// a token_uri that is https (or http to a loopback address, for local token servers).
// Other credential types (authorized users, external accounts, impersonation) make the
// oauth2 library fetch other URLs or run other flows, so they are refused.
func parseServiceAccountKey(raw []byte) (serviceAccountKey, bool) {
	var k serviceAccountKey
	if err := json.Unmarshal(raw, &k); err != nil {
		return k, false
	}
	if k.Type != string(google.ServiceAccount) || k.ClientEmail == "" || k.PrivateKey == "" {
		return k, false
	}
	block, _ := pem.Decode([]byte(k.PrivateKey))
	if block == nil {
		return k, false
	}
	priv, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		rk, err := x509.ParsePKCS1PrivateKey(block.Bytes)
		if err != nil {
			return k, false
		}
		priv = rk
	}
	if _, ok := priv.(*rsa.PrivateKey); !ok {
		return k, false
	}
	// The library falls back to Google's token endpoint when token_uri is empty.
	if k.TokenURI != "" && !tokenURIAllowed(k.TokenURI) {
		return k, false
	}
	return k, true
}

// tokenURIAllowed admits the URL the signed assertion is posted to: https with a host
// and no user information, or http to a loopback host. A signed assertion is good for
// an hour of tokens and must not cross a network in the clear. The address dialled is
// then the endpoint fence's to judge, as a model endpoint's is (loopback only where
// loopback endpoints are allowed; never link-local or metadata addresses).
func tokenURIAllowed(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.User != nil {
		return false
	}
	switch u.Scheme {
	case "https":
		return true
	case "http":
		host := u.Hostname()
		if host == "localhost" {
			return true
		}
		ip := net.ParseIP(host)
		return ip != nil && ip.IsLoopback()
	}
	return false
}
