package kubeauth_test

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/switchboard-dev/switchboard/runtime/auth"
	"github.com/switchboard-dev/switchboard/runtime/auth/kubeauth"
)

// Floods of bad tokens (spec/authentication.md, "Floods of bad tokens").

// reviewCounter is a transport under the review client's bounds: it counts the
// TokenReviews that reach the API server and the most in flight at once.
type reviewCounter struct {
	next        http.RoundTripper
	reviews     atomic.Int32
	inFlight    atomic.Int32
	maxInFlight atomic.Int32
}

func (c *reviewCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Path == "/apis/authentication.k8s.io/v1/tokenreviews" {
		c.reviews.Add(1)
		n := c.inFlight.Add(1)
		defer c.inFlight.Add(-1)
		for m := c.maxInFlight.Load(); n > m && !c.maxInFlight.CompareAndSwap(m, n); m = c.maxInFlight.Load() {
		}
	}
	return c.next.RoundTrip(req)
}

// countingClient is NewClient(runtimeConfig, inFlight) with a reviewCounter under it.
func countingClient(t *testing.T, inFlight int) (kubernetes.Interface, *reviewCounter) {
	t.Helper()
	counter := &reviewCounter{}
	cfg := rest.CopyConfig(runtimeConfig)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { counter.next = rt; return counter })
	client, err := kubeauth.NewClient(cfg, inFlight)
	if err != nil {
		t.Fatal(err)
	}
	return client, counter
}

// forged returns a JWT for audience that expires in ten minutes, with a random
// signature: shaped like a caller's token, but signed by nobody.
func forged(t testing.TB, audience string) string {
	t.Helper()
	sig := make([]byte, 64)
	if _, err := rand.Read(sig); err != nil {
		t.Fatal(err)
	}
	enc := base64.RawURLEncoding
	payload, _ := json.Marshal(map[string]any{"aud": []string{audience}, "exp": time.Now().Add(10 * time.Minute).Unix(),
		"iss": "https://kubernetes.default.svc.cluster.local", "sub": "system:serviceaccount:default:forged"})
	return enc.EncodeToString([]byte(`{"alg":"ES256","kid":"forged"}`)) + "." + enc.EncodeToString(payload) + "." + enc.EncodeToString(sig)
}

// Tokens whose refusal is certain cost no TokenReview: garbage, a token for another
// audience, an expired one. A forged token of the right shape is reviewed, once.
func TestNoReviewForCertainRefusals(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "shape")
	newServiceAccount(t, ns, "caller")
	client, counter := countingClient(t, 0)
	a := newAuth(t, kubeauth.Config{Client: client, FailureBurst: -1})
	now := time.Now()
	garbage := make([]byte, 32)
	_, _ = rand.Read(garbage)
	for what, token := range map[string]string{
		"random hex":             hex.EncodeToString(garbage),
		"not-a-token":            "not-a-token",
		"audience other":         tokenFor(t, ns, "caller", "other"),
		"the API's audience":     tokenFor(t, ns, "caller"),
		"expired, re-signed":     resign(t, tokenFor(t, ns, "caller", kubeauth.DefaultAudience), map[string]int64{"iat": now.Add(-15 * time.Minute).Unix(), "nbf": now.Add(-15 * time.Minute).Unix(), "exp": now.Add(-5 * time.Minute).Unix()}),
		"forged for another aud": forged(t, "other"),
	} {
		if _, err := a.Authenticator.Authenticate(bearer(token)); !errors.Is(err, auth.ErrUnauthenticated) {
			t.Errorf("%s: %v, want ErrUnauthenticated", what, err)
		}
	}
	if n := counter.reviews.Load(); n != 0 {
		t.Errorf("%d TokenReviews for tokens the API server is certain to refuse, want none", n)
	}
	if _, err := a.Authenticator.Authenticate(bearer(forged(t, kubeauth.DefaultAudience))); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Errorf("a forged token of the right shape: %v, want ErrUnauthenticated", err)
	}
	if n := counter.reviews.Load(); n != 1 {
		t.Errorf("%d TokenReviews for a forged token of the right shape, want 1", n)
	}
}

// An address that failed FailureBurst times in a row is throttled without a review,
// whatever token it presents next; another address is not.
func TestFailuresThrottledPerAddress(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "throttle")
	newServiceAccount(t, ns, "caller")
	good := tokenFor(t, ns, "caller", kubeauth.DefaultAudience)
	client, counter := countingClient(t, 0)
	a := newAuth(t, kubeauth.Config{Client: client, FailureBurst: 3})
	from := func(addr, token string) *http.Request {
		r := bearer(token)
		r.RemoteAddr = addr
		return r
	}
	const attacker, other = "192.0.2.66:51000", "192.0.2.7:51000"
	if _, err := a.Authenticator.Authenticate(from(attacker, good)); err != nil {
		t.Fatal(err) // a success costs no attempt
	}
	for i := range 3 {
		if _, err := a.Authenticator.Authenticate(from(attacker, forged(t, kubeauth.DefaultAudience))); !errors.Is(err, auth.ErrUnauthenticated) {
			t.Fatalf("failure %d: %v, want ErrUnauthenticated", i+1, err)
		}
	}
	reviews := counter.reviews.Load()
	for _, token := range []string{forged(t, kubeauth.DefaultAudience), "garbage", good} {
		if _, err := a.Authenticator.Authenticate(from(attacker, token)); !errors.Is(err, auth.ErrThrottled) {
			t.Errorf("after three failures: %v, want ErrThrottled", err)
		}
	}
	if n := counter.reviews.Load(); n != reviews {
		t.Errorf("%d TokenReviews for a throttled address", n-reviews)
	}
	if p, err := a.Authenticator.Authenticate(from(other, good)); err != nil || p == nil {
		t.Errorf("another address: %v, %v", p, err)
	}
}

// At most inFlight TokenReviews are in flight; the ones beyond are refused at once as
// ErrUnavailable, not queued.
func TestReviewsInFlightBounded(t *testing.T) {
	t.Parallel()
	const inFlight, callers = 2, 40
	client, counter := countingClient(t, inFlight)
	a := newAuth(t, kubeauth.Config{Client: client, FailureBurst: -1})
	var (
		wg                sync.WaitGroup
		refused, reviewed atomic.Int32
		release           = make(chan struct{})
	)
	for range callers {
		token := forged(t, kubeauth.DefaultAudience)
		wg.Go(func() {
			<-release
			_, err := a.Authenticator.Authenticate(bearer(token))
			switch {
			case errors.Is(err, auth.ErrUnavailable):
				refused.Add(1)
			case errors.Is(err, auth.ErrUnauthenticated):
				reviewed.Add(1)
			default:
				t.Errorf("a forged token: %v", err)
			}
		})
	}
	close(release)
	wg.Wait()
	t.Logf("%d callers: %d reviewed and refused, %d refused unreviewed; %d reviews in flight at most",
		callers, reviewed.Load(), refused.Load(), counter.maxInFlight.Load())
	if n := counter.maxInFlight.Load(); n > inFlight {
		t.Errorf("%d TokenReviews in flight at once, want at most %d", n, inFlight)
	}
	if refused.Load() == 0 {
		t.Errorf("none of %d concurrent reviews was refused with %d allowed in flight", callers, inFlight)
	}
	if int(counter.reviews.Load()) != int(reviewed.Load()) {
		t.Errorf("%d reviews reached the API server for %d refusals by review", counter.reviews.Load(), reviewed.Load())
	}
}
