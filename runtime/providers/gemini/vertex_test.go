package gemini_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/engine/enginetest"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/gemini"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// Vertex AI attempts authenticate with an access token minted from the deployment's
// service account key at the key's token_uri (here a local token server that checks the
// JWT-bearer grant and the assertion's signature with the account's public key).

func TestVertexTokenGrant(t *testing.T) {
	ts := newTokenServer(t)
	sa, token := ts.account(0, "sbkey0grant")
	up := newUpstream(t, http.StatusOK, "generate_text.json")
	res := run(t, vertexDeployment(up.URL, sa), hello(t))
	if res.err != nil {
		t.Fatalf("Execute: %v", res.err)
	}
	c := up.only(t)
	checkCredentialPlacement(t, c, "Authorization", "Bearer "+token)
	for _, secret := range []string{sa.pem, sa.keyID, sa.json, "PRIVATE KEY"} {
		if strings.Contains(string(c.Body), secret) || strings.Contains(strings.Join(flatten(c.Header), " "), secret) {
			t.Error("the service account key went to the model endpoint")
		}
	}
	if n := ts.count(); n != 1 {
		t.Errorf("%d token requests, want 1", n)
	}
}

func TestVertexTokenReusedAcrossAdapters(t *testing.T) {
	ts := newTokenServer(t)
	sa, token := ts.account(0, "sbkey0reuse")
	up := newUpstream(t, http.StatusOK, "generate_text.json")
	// The engine builds an adapter per attempt: each run is a new adapter.
	for range 3 {
		if res := run(t, vertexDeployment(up.URL, sa), hello(t)); res.err != nil {
			t.Fatalf("Execute: %v", res.err)
		}
	}
	for _, c := range up.requests() {
		checkCredentialPlacement(t, c, "Authorization", "Bearer "+token)
	}
	if n := ts.count(); n != 1 {
		t.Errorf("%d token requests for three attempts with one key, want 1", n)
	}
}

func TestVertexRotatedKeyTakesEffectAtTheNextAttempt(t *testing.T) {
	ts := newTokenServer(t)
	old, oldToken := ts.account(0, "sbkey0rotate")
	rotated, newToken := ts.account(1, "sbkey1rotate")
	up := newUpstream(t, http.StatusOK, "generate_text.json")

	if res := run(t, vertexDeployment(up.URL, old), hello(t)); res.err != nil {
		t.Fatalf("Execute: %v", res.err)
	}
	start := time.Now()
	if res := run(t, vertexDeployment(up.URL, rotated), hello(t)); res.err != nil {
		t.Fatalf("Execute with the rotated key: %v", res.err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the attempt with the rotated key took %s", d)
	}
	reqs := up.requests()
	checkCredentialPlacement(t, reqs[0], "Authorization", "Bearer "+oldToken)
	checkCredentialPlacement(t, reqs[1], "Authorization", "Bearer "+newToken)
	if n := ts.count(); n != 2 {
		t.Errorf("%d token requests, want one per key", n)
	}
}

func TestVertexTokenEndpointFailures(t *testing.T) {
	for _, tc := range []struct {
		status    int
		code      protocol.Code
		retryable bool
	}{
		{http.StatusBadRequest, protocol.CodeProviderRejected, false}, // invalid_grant: a deleted or disabled key
		{http.StatusUnauthorized, protocol.CodeProviderRejected, false},
		{http.StatusForbidden, protocol.CodeProviderRejected, false},
		{http.StatusTooManyRequests, protocol.CodeProviderUnavailable, true},
		{http.StatusInternalServerError, protocol.CodeProviderUnavailable, true},
		{http.StatusServiceUnavailable, protocol.CodeProviderUnavailable, true},
	} {
		t.Run(http.StatusText(tc.status), func(t *testing.T) {
			ts := newTokenServer(t)
			sa, _ := ts.account(0, "sbkey0fail")
			ts.status = tc.status
			up := newUpstream(t, http.StatusOK, "generate_text.json")
			res := run(t, vertexDeployment(up.URL, sa), hello(t))
			pe := asError(t, res.err)
			if pe.Code != tc.code || pe.Retryable != tc.retryable {
				t.Errorf("error %+v, want %s retryable=%v", pe, tc.code, tc.retryable)
			}
			// Nothing reached the model, so the engine may fall back whatever the code.
			if !errors.Is(res.err, engine.ErrNotSent) {
				t.Errorf("error %v is not marked engine.ErrNotSent", res.err)
			}
			if n := len(up.requests()); n != 0 {
				t.Errorf("%d model requests without a token", n)
			}
			// The token endpoint's body (which echoes the signed assertion) never surfaces.
			for _, text := range []string{"invalid_grant", "Invalid JWT", "eyJ", "oauth2"} {
				if strings.Contains(pe.Message, text) || strings.Contains(res.logs, text) {
					t.Errorf("token endpoint text %q surfaced: %q\n%s", text, pe.Message, res.logs)
				}
			}
			if !strings.Contains(res.logs, "Provider token request failed") {
				t.Errorf("no fixed log line for the failure:\n%s", res.logs)
			}
		})
	}
}

func TestVertexTokenEndpointUnreachable(t *testing.T) {
	ts := newTokenServer(t)
	sa := newServiceAccount(t, 0, "sbkey0unreachable", "http://127.0.0.1:1/token")
	up := newUpstream(t, http.StatusOK, "generate_text.json")
	res := run(t, vertexDeployment(up.URL, sa), hello(t))
	if pe := asError(t, res.err); pe.Code != protocol.CodeProviderUnavailable || !pe.Retryable {
		t.Errorf("error %+v, want provider_unavailable, retryable", pe)
	}
	if !errors.Is(res.err, engine.ErrNotSent) {
		t.Errorf("error %v is not marked engine.ErrNotSent", res.err)
	}
	if ts.count() != 0 || len(up.requests()) != 0 {
		t.Error("something was sent")
	}
}

func TestVertexTokenWaitEndsWithTheAttempt(t *testing.T) {
	ts := newTokenServer(t)
	sa, _ := ts.account(0, "sbkey0slow")
	ts.hold = make(chan struct{})
	t.Cleanup(func() { close(ts.hold) }) // before the server closes: it waits for its handlers
	up := newUpstream(t, http.StatusOK, "generate_text.json")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	res := runCtx(t, ctx, vertexDeployment(up.URL, sa), hello(t))
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Execute returned %s after starting, want soon after its context ended", d)
	}
	if pe := asError(t, res.err); pe.Code != protocol.CodeProviderTimeout {
		t.Errorf("error %+v, want provider_timeout", pe)
	}
}

// TestVertexTokenFetchesDoNotPileUp: attempts that give up on a hung token endpoint
// leave nothing behind but the one fetch in flight, which the next attempts join; once
// the endpoint answers, its token serves them all.
func TestVertexTokenFetchesDoNotPileUp(t *testing.T) {
	ts := newTokenServer(t)
	sa, token := ts.account(0, "sbkey0pileup")
	hold := make(chan struct{})
	ts.hold = hold
	var once sync.Once
	release := func() { once.Do(func() { close(hold) }) }
	t.Cleanup(release) // before the server closes: it waits for its handlers
	up := newUpstream(t, http.StatusOK, "generate_text.json")
	d := vertexDeployment(up.URL, sa)

	baseline := runtime.NumGoroutine()
	const attempts = 40
	var wg sync.WaitGroup
	for range attempts {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			if pe := asError(t, runCtx(t, ctx, d, hello(t)).err); pe.Code != protocol.CodeProviderTimeout {
				t.Errorf("error %+v, want provider_timeout", pe)
			}
		})
	}
	wg.Wait()
	// Left while the endpoint hangs: the fetch and its connection (both ends), not a
	// goroutine per attempt.
	if n := settledGoroutines(baseline + 8); n > baseline+8 {
		t.Errorf("%d goroutines while the token endpoint hangs, baseline %d: fetches piled up", n, baseline)
	}
	if n := ts.count(); n != 1 {
		t.Errorf("%d token requests for %d waiting attempts, want 1", n, attempts)
	}

	release()
	// The token the fetch brings back is cached for the next attempt, whose context ended
	// before it came.
	deadline := time.Now().Add(testTimeout)
	for {
		res := run(t, d, hello(t))
		if res.err == nil {
			checkCredentialPlacement(t, up.only(t), "Authorization", "Bearer "+token)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no attempt succeeded after the endpoint was released: %v", res.err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n, peak := ts.count(), ts.peak(); n != 1 || peak != 1 {
		t.Errorf("%d token requests, at most %d at once; want 1", n, peak)
	}
	// What stays is the idle keep-alive connection to each server.
	if n := settledGoroutines(baseline + 6); n > baseline+6 {
		t.Errorf("%d goroutines after the token endpoint answered, baseline %d", n, baseline)
	}
}

// settledGoroutines waits up to a few seconds for the goroutine count to fall to at most
// limit, and returns the last count.
func settledGoroutines(limit int) int {
	deadline := time.Now().Add(3 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= limit || time.Now().After(deadline) {
			return n
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestVertex401DropsTheCachedToken(t *testing.T) {
	ts := newTokenServer(t)
	sa, _ := ts.account(0, "sbkey0revoked")
	var calls counter
	up := newUpstream(t, 0, "")
	ok := testdata(t, "generate_text.json")
	up.handler = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if calls.inc() == 1 {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":{"code":401,"message":"Request had invalid authentication credentials.","status":"UNAUTHENTICATED"}}`))
			return
		}
		_, _ = w.Write(ok)
	}
	d := vertexDeployment(up.URL, sa)
	if pe := asError(t, run(t, d, hello(t)).err); pe.Code != protocol.CodeProviderRejected {
		t.Fatalf("first attempt: %+v, want provider_rejected", pe)
	}
	if res := run(t, d, hello(t)); res.err != nil {
		t.Fatalf("second attempt: %v", res.err)
	}
	if n := ts.count(); n != 2 {
		t.Errorf("%d token requests, want a new token after the 401", n)
	}
}

func TestVertexEndpointDefaults(t *testing.T) {
	ts := newTokenServer(t)
	sa, _ := ts.account(0, "sbkey0defaults")
	// No endpoint: the regional default is used. The request is sent to Google, so only
	// New is checked here (the adapter prints no URL; String names provider and model).
	for _, region := range []string{"us-central1", "global"} {
		d := vertexDeployment("", sa, func(d *routing.Deployment) { d.Region = region })
		if _, err := newAdapter(d); err != nil {
			t.Errorf("New in %s: %v", region, err)
		}
	}
}

// flatten lists a header's values.
func flatten(h http.Header) []string {
	var out []string
	for k, vs := range h {
		out = append(out, k)
		out = append(out, vs...)
	}
	return out
}

// TestVertexTokenURIFenced: the token exchange dials through the adapter's client, so
// a token_uri the endpoint fence refuses — link-local, cloud metadata, or loopback while
// loopback is not allowed (the shared client's fence, cluster mode's) — ends the attempt
// as provider_rejected with one message whatever the address, before anything is sent:
// the loopback token server and the model endpoint see no request.
func TestVertexTokenURIFenced(t *testing.T) {
	ts := newTokenServer(t)
	up := newUpstream(t, http.StatusOK, "generate_text.json")
	var first *protocol.Error
	for i, uri := range []string{ts.URL + "/token", "https://169.254.169.254/token", "https://[fd00:ec2::254]:8443/token", "https://[fe80::1]/token"} {
		sa := newServiceAccount(t, 0, fmt.Sprintf("sbkey%dfence", i), uri)
		d := vertexDeployment(up.URL, sa)
		ad, err := gemini.New(d) // the shared client: loopback refused
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err = ad.Execute(ctx, engine.Attempt{ExecutionID: "exe_test", Number: 1, Request: hello(t), Deployment: d}, &enginetest.Recorder{})
		cancel()
		var pe *protocol.Error
		if !errors.As(err, &pe) || pe.Code != protocol.CodeProviderRejected || pe.Retryable || !errors.Is(err, engine.ErrNotSent) {
			t.Errorf("token_uri %s: Execute = %v, want provider_rejected before anything was sent", uri, err)
			continue
		}
		if first == nil {
			first = pe
		} else if pe.Message != first.Message {
			t.Errorf("token_uri %s: message %q, want every refusal's %q", uri, pe.Message, first.Message)
		}
	}
	if n := ts.count(); n != 0 {
		t.Errorf("the loopback token server answered %d requests, want none", n)
	}
	if n := len(up.requests()); n != 0 {
		t.Errorf("the model endpoint got %d requests, want none", n)
	}
}
