package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/switchboard-dev/switchboard/runtime/client"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// Authentication and per-caller isolation of the built binary (spec/authentication.md):
// in cluster mode against envtest's API server, which mints the callers' tokens
// (TokenRequest), reviews them (TokenReview) and answers access reviews
// (SubjectAccessReview) with real RBAC; and the static tokens file in standalone mode.
// Every test also checks that no credential reaches the binary's output, run at its most
// verbose log level, or any response it gave (the canary).

// authClient makes the tests' HTTP requests and records every response for the canary.
type authClient struct {
	rec  *recorder
	http *http.Client
	mu   sync.Mutex
	// secrets are the credentials of the test, by what they are, for the canary.
	secrets map[string]string
}

func newAuthClient() *authClient {
	rec := &recorder{next: http.DefaultTransport}
	return &authClient{rec: rec, http: &http.Client{Transport: rec, Timeout: 30 * time.Second}, secrets: map[string]string{}}
}

// secret adds a credential to the canary's list and returns it.
func (c *authClient) secret(what, value string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.secrets[what] = value
	return value
}

func (c *authClient) secretList() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]string, len(c.secrets))
	for k, v := range c.secrets {
		out[k] = v
	}
	return out
}

// reply is an HTTP answer.
type reply struct {
	status int
	header http.Header
	body   []byte
	err    *protocol.Error // the error body's error, for a status >= 400
}

func (r reply) String() string { return fmt.Sprintf("%d %s", r.status, r.body) }

// do sends a request; token, when not empty, goes into "Authorization: Bearer";
// header holds more header names and values.
func (c *authClient) do(t *testing.T, method, url, token, body string, header ...string) reply {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.http.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, redactedURL(url), err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, redactedURL(url), err)
	}
	r := reply{status: resp.StatusCode, header: resp.Header, body: data}
	if r.status >= 400 {
		var eb protocol.ErrorBody
		if err := json.Unmarshal(data, &eb); err != nil || eb.Error == nil {
			t.Fatalf("%s %s: status %d without a JSON error body: %s", method, redactedURL(url), r.status, data)
		}
		r.err = eb.Error
	}
	return r
}

// redactedURL drops the query of a URL, which may hold a stream token, from a failure
// message.
func redactedURL(u string) string {
	if i := strings.IndexByte(u, '?'); i >= 0 {
		return u[:i] + "?…"
	}
	return u
}

// wantError fails t unless r is the error status with code.
func wantError(t *testing.T, what string, r reply, status int, code protocol.Code) {
	t.Helper()
	if r.status != status || r.err == nil || r.err.Code != code {
		t.Errorf("%s: got %s; want %d %s", what, r, status, code)
	}
	if status == http.StatusUnauthorized && !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
		t.Errorf("%s: 401 with WWW-Authenticate %q, want a Bearer challenge", what, r.header.Get("WWW-Authenticate"))
	}
}

// accepted is a 202 body.
type accepted struct {
	ID    string       `json:"id"`
	Links client.Links `json:"links"`
}

func chatBody(text string) string {
	return fmt.Sprintf(`{"ability":"chat","input":[{"type":"text","text":%q}]}`, text)
}

const stallBody = `{"ability":"stall","input":[{"type":"text","text":"wait for me"}]}`

// submit posts body as the caller with token and fails t unless it is accepted; the
// links' stream tokens join the canary's secrets.
func (c *authClient) submit(t *testing.T, base, token, body string, header ...string) accepted {
	t.Helper()
	r := c.do(t, http.MethodPost, base+"/v1/executions", token, body, header...)
	if r.status != http.StatusAccepted {
		t.Fatalf("submit: got %s, want 202", r)
	}
	var a accepted
	if err := json.Unmarshal(r.body, &a); err != nil || a.ID == "" {
		t.Fatalf("202 body %s: %v", r.body, err)
	}
	for _, link := range []string{a.Links.Events, a.Links.Result} {
		if tok, err := linkToken(link); err == nil {
			c.secret("stream token of "+a.ID, tok)
		}
	}
	return a
}

// status reads an execution's status as the caller with token.
func (c *authClient) status(t *testing.T, base, token, id string) protocol.ExecutionStatus {
	t.Helper()
	r := c.do(t, http.MethodGet, base+"/v1/executions/"+id, token, "")
	if r.status != http.StatusOK {
		t.Fatalf("status of %s: %s", id, r)
	}
	var st protocol.ExecutionStatus
	if err := json.Unmarshal(r.body, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// waitTerminal waits until the execution is completed or failed and returns its status.
func (c *authClient) waitTerminal(t *testing.T, base, token, id string) protocol.ExecutionStatus {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		st := c.status(t, base, token, id)
		if st.Status == protocol.StatusCompleted || st.Status == protocol.StatusFailed {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still %s after 15s", id, st.Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitRunning waits until the execution has been routed (its first attempt started).
func (c *authClient) waitRunning(t *testing.T, base, token, id string) {
	t.Helper()
	eventually(t, 10*time.Second, id+" running", func() bool {
		st := c.status(t, base, token, id)
		return st.Status == protocol.StatusRunning && st.Route != nil
	})
}

// canary fails t if any of the client's secrets appears in out (the binary's output) or
// in any response the client received.
func (c *authClient) canary(t *testing.T, label, out string) {
	t.Helper()
	secrets := c.secretList()
	if len(secrets) == 0 {
		t.Fatal("the canary has no secrets to look for")
	}
	if found := secretsIn(out, secrets); len(found) > 0 {
		slices.Sort(found)
		t.Errorf("%s output holds %s, on lines %v", label, strings.Join(found, ", "), linesWith(out, secrets))
	}
	if found := secretsIn(c.rec.String(), secrets); len(found) > 0 {
		slices.Sort(found)
		t.Errorf("responses hold %s", strings.Join(found, ", "))
	}
}

// alterOneByte returns tok with its middle character replaced by another of the
// base64url alphabet.
func alterOneByte(tok string) string {
	i := len(tok) / 2
	c := byte('A')
	if tok[i] == 'A' {
		c = 'B'
	}
	return tok[:i] + string(c) + tok[i+1:]
}

// withToken replaces the token parameter of a link.
func withToken(link, tok string) string {
	i := strings.Index(link, "token=")
	if i < 0 {
		return link
	}
	rest := link[i+len("token="):]
	if j := strings.IndexByte(rest, '&'); j >= 0 {
		return link[:i] + "token=" + tok + rest[j:]
	}
	return link[:i] + "token=" + tok
}

// pathOf returns the path of a link, without its query.
func pathOf(link string) string {
	if i := strings.IndexByte(link, '?'); i >= 0 {
		return link[:i]
	}
	return link
}

// TestClusterAuth covers spec/authentication.md in cluster mode: who may run which
// models, isolation of executions, idempotency per principal, signed stream links, the
// per-principal limit, the secure /metrics endpoint and the Go client's token file.
func TestClusterAuth(t *testing.T) {
	t.Parallel()
	w := cluster(t)
	start := time.Now()
	sb := startInCluster(t, w, "main", "--max-concurrent-per-principal", "2")
	t.Logf("cluster-mode runtime ready in %s", time.Since(start).Round(time.Millisecond))
	w.waitDeploymentsReady(t, 20*time.Second)
	base := "http://" + sb.api

	c := newAuthClient()
	c.secret("the manager's token", w.managerToken)
	alice := c.secret("alice's token", w.token(t, teamA, "alice", callerAudience))
	carol := c.secret("carol's token", w.token(t, teamA, "carol", callerAudience))
	bob := c.secret("bob's token", w.token(t, teamB, "bob", callerAudience))
	viewer := c.secret("viewer's token", w.token(t, callersNamespace, "viewer", callerAudience))
	nobody := c.secret("nobody's token", w.token(t, callersNamespace, "nobody", callerAudience))
	aliceOther := c.secret("alice's token for audience other", w.token(t, teamA, "alice", "other"))
	aliceAPI := c.secret("alice's token for the API server", w.token(t, teamA, "alice"))

	// alice's first execution, which later subtests read as other callers.
	var first accepted

	t.Run("a: an executor runs its namespace's models and nothing else is revealed", func(t *testing.T) {
		first = c.submit(t, base, alice, chatBody("hello from alice"))
		st := c.waitTerminal(t, base, alice, first.ID)
		if st.Status != protocol.StatusCompleted || st.Route == nil || st.Route.Deployment != teamA+"/alpha-chat" {
			t.Errorf("alice's execution: %+v, route %+v; want completed on team-a/alpha-chat", st, st.Route)
		}

		r := c.do(t, http.MethodPost, base+"/v1/executions", alice,
			`{"ability":"summarize","input":[{"type":"text","text":"summarize me"}]}`)
		wantError(t, "alice asks for an ability served only in team-b", r, http.StatusUnprocessableEntity, protocol.CodeUnsupportedCapability)
		for _, hint := range []string{teamB, "beta", "summarizer", "anthropic"} {
			if strings.Contains(strings.ToLower(string(r.body)), hint) {
				t.Errorf("the 422 reveals %q: %s", hint, r.body)
			}
		}

		// A preference for a model alice may not use is skipped like an unknown one.
		pref := c.submit(t, base, alice, `{"ability":"chat","input":[{"type":"text","text":"hi"}],"routing":{"prefer":["team-b/beta-chat"]}}`)
		if st := c.waitTerminal(t, base, alice, pref.ID); st.Route == nil || st.Route.Deployment != teamA+"/alpha-chat" {
			t.Errorf("prefer team-b/beta-chat: route %+v, want team-a/alpha-chat", st.Route)
		}

		wantError(t, "no token", c.do(t, http.MethodPost, base+"/v1/executions", "", chatBody("hi")),
			http.StatusUnauthorized, protocol.CodeUnauthenticated)
		wantError(t, "a token for audience other", c.do(t, http.MethodPost, base+"/v1/executions", aliceOther, chatBody("hi")),
			http.StatusUnauthorized, protocol.CodeUnauthenticated)
		wantError(t, "a token for the API server's audience", c.do(t, http.MethodPost, base+"/v1/executions", aliceAPI, chatBody("hi")),
			http.StatusUnauthorized, protocol.CodeUnauthenticated)
		wantError(t, "a garbage token", c.do(t, http.MethodPost, base+"/v1/executions", "not-a-token", chatBody("hi")),
			http.StatusUnauthorized, protocol.CodeUnauthenticated)
		wantError(t, "a read without a token", c.do(t, http.MethodGet, base+"/v1/executions/"+first.ID, "", ""),
			http.StatusUnauthorized, protocol.CodeUnauthenticated)
		wantError(t, "a ServiceAccount without any binding", c.do(t, http.MethodPost, base+"/v1/executions", nobody, chatBody("hi")),
			http.StatusForbidden, protocol.CodePermissionDenied)
		wantError(t, "a viewer, who may not create anywhere", c.do(t, http.MethodPost, base+"/v1/executions", viewer, chatBody("hi")),
			http.StatusForbidden, protocol.CodePermissionDenied)
	})
	if first.ID == "" {
		t.Fatal("no first execution")
	}

	t.Run("b: others get 404 unless RBAC lets them read; a viewer cannot cancel", func(t *testing.T) {
		// A stalled execution of alice's: a cancel that should have been refused would
		// show.
		stalled := c.submit(t, base, alice, stallBody)
		c.waitRunning(t, base, alice, stalled.ID)
		unknown := c.do(t, http.MethodGet, base+"/v1/executions/exe_01jzzzzzzzzzzzzzzzzzzzzzzzzzzzzz", bob, "")
		wantError(t, "an unknown execution", unknown, http.StatusNotFound, protocol.CodeNotFound)

		for _, id := range []string{first.ID, stalled.ID} {
			for _, req := range []struct{ method, path string }{
				{http.MethodGet, ""}, {http.MethodGet, "/result"}, {http.MethodGet, "/events"}, {http.MethodPost, "/cancel"},
			} {
				what := fmt.Sprintf("bob: %s %s of alice's %s", req.method, req.path, id)
				r := c.do(t, req.method, base+"/v1/executions/"+id+req.path, bob, "", "Accept", "application/json")
				wantError(t, what, r, http.StatusNotFound, protocol.CodeNotFound)
				if string(r.body) != string(unknown.body) {
					t.Errorf("%s: body %s differs from an unknown execution's %s", what, r.body, unknown.body)
				}
			}
			// carol, an executor in team-a, has create but not get: 404 as well.
			wantError(t, "carol reads alice's", c.do(t, http.MethodGet, base+"/v1/executions/"+id, carol, ""),
				http.StatusNotFound, protocol.CodeNotFound)
		}
		// With SSE, a 404 is still a JSON error.
		r := c.do(t, http.MethodGet, base+"/v1/executions/"+first.ID+"/events", bob, "", "Accept", "text/event-stream")
		wantError(t, "bob's event stream of alice's", r, http.StatusNotFound, protocol.CodeNotFound)

		// The viewer (get in team-a) reads alice's executions, but cannot cancel them.
		if st := c.status(t, base, viewer, first.ID); st.ID != first.ID || st.Status != protocol.StatusCompleted {
			t.Errorf("viewer's status of alice's: %+v", st)
		}
		res := c.do(t, http.MethodGet, base+"/v1/executions/"+first.ID+"/result", viewer, "")
		var snap protocol.Snapshot
		if res.status != http.StatusOK || json.Unmarshal(res.body, &snap) != nil || snap.Status != protocol.StatusCompleted ||
			len(snap.Output) != 1 || snap.Output[0].Text != "hello from alice" {
			t.Errorf("viewer's result of alice's: %s", res)
		}
		ev := c.do(t, http.MethodGet, base+"/v1/executions/"+first.ID+"/events", viewer, "", "Accept", "application/json")
		if ev.status != http.StatusOK || !strings.Contains(string(ev.body), `"execution.completed"`) {
			t.Errorf("viewer's events of alice's: %s", ev)
		}
		sse := c.do(t, http.MethodGet, base+"/v1/executions/"+first.ID+"/events", viewer, "", "Accept", "text/event-stream")
		if sse.status != http.StatusOK || !strings.Contains(string(sse.body), "event: execution.completed") {
			t.Errorf("viewer's event stream of alice's: %s", sse)
		}
		for _, id := range []string{first.ID, stalled.ID} {
			wantError(t, "viewer cancels alice's "+id, c.do(t, http.MethodPost, base+"/v1/executions/"+id+"/cancel", viewer, ""),
				http.StatusNotFound, protocol.CodeNotFound)
		}
		if st := c.status(t, base, alice, stalled.ID); st.Status != protocol.StatusRunning {
			t.Errorf("alice's stalled execution after refused cancels: %s %+v", st.Status, st.Error)
		}

		// The viewer's grant covers team-a only: bob's execution (team-b) stays hidden.
		bobs := c.submit(t, base, bob, chatBody("hello from bob"))
		if st := c.waitTerminal(t, base, bob, bobs.ID); st.Route == nil || st.Route.Deployment != teamB+"/beta-chat" {
			t.Errorf("bob's execution: route %+v, want team-b/beta-chat", st.Route)
		}
		wantError(t, "viewer reads bob's", c.do(t, http.MethodGet, base+"/v1/executions/"+bobs.ID, viewer, ""),
			http.StatusNotFound, protocol.CodeNotFound)
		wantError(t, "alice reads bob's", c.do(t, http.MethodGet, base+"/v1/executions/"+bobs.ID, alice, ""),
			http.StatusNotFound, protocol.CodeNotFound)

		// The owner cancels her own.
		if r := c.do(t, http.MethodPost, base+"/v1/executions/"+stalled.ID+"/cancel", alice, ""); r.status != http.StatusAccepted {
			t.Errorf("alice cancels her own: %s", r)
		}
		if st := c.waitTerminal(t, base, alice, stalled.ID); st.Error == nil || st.Error.Code != protocol.CodeCancelled {
			t.Errorf("alice's cancelled execution: %+v", st)
		}
	})

	t.Run("c: idempotency keys are scoped to the principal", func(t *testing.T) {
		body := chatBody("once per caller")
		key := "Idempotency-Key"
		a1 := c.submit(t, base, alice, body, key, `"order-4711"`)
		c2 := c.submit(t, base, carol, body, key, `"order-4711"`)
		if a1.ID == c2.ID {
			t.Fatalf("alice and carol share execution %s", a1.ID)
		}
		b3 := c.submit(t, base, bob, body, key, "order-4711")
		if b3.ID == a1.ID || b3.ID == c2.ID {
			t.Errorf("bob's execution %s is alice's or carol's", b3.ID)
		}
		r := c.do(t, http.MethodPost, base+"/v1/executions", alice, body, key, "order-4711")
		var replay accepted
		if r.status != http.StatusAccepted || json.Unmarshal(r.body, &replay) != nil || replay.ID != a1.ID ||
			r.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("alice's replay: %s, Idempotent-Replayed %q; want her %s", r, r.header.Get("Idempotent-Replayed"), a1.ID)
		}
		r = c.do(t, http.MethodPost, base+"/v1/executions", carol, chatBody("another body"), key, "order-4711")
		wantError(t, "carol reuses her key with another body", r, http.StatusUnprocessableEntity, protocol.CodeIdempotencyKeyReused)
		for _, x := range []struct{ token, id string }{{alice, a1.ID}, {carol, c2.ID}, {bob, b3.ID}} {
			if st := c.waitTerminal(t, base, x.token, x.id); st.Status != protocol.StatusCompleted {
				t.Errorf("%s: %s", x.id, st.Status)
			}
		}
	})

	t.Run("d: a signed link opens that execution's events and result and nothing else", func(t *testing.T) {
		a := c.submit(t, base, alice, chatBody("follow me"))
		other := c.submit(t, base, alice, chatBody("another one"))
		for _, x := range []accepted{a, other} {
			c.waitTerminal(t, base, alice, x.ID)
		}
		tok, err := linkToken(a.Links.Events)
		if err != nil {
			t.Fatalf("links.events has no token: %v", err)
		}
		if rtok, err := linkToken(a.Links.Result); err != nil || rtok == "" {
			t.Errorf("links.result has no token: %v", err)
		}
		for _, link := range []string{a.Links.Self, a.Links.Cancel} {
			if strings.Contains(link, "token=") {
				t.Errorf("link %s carries a token", redactedURL(link))
			}
		}

		// No Authorization header: the link alone.
		ev := c.do(t, http.MethodGet, base+a.Links.Events, "", "", "Accept", "application/json")
		if ev.status != http.StatusOK || !strings.Contains(string(ev.body), `"execution.completed"`) {
			t.Errorf("events by link: %s", ev)
		}
		sse := c.do(t, http.MethodGet, base+a.Links.Events, "", "", "Accept", "text/event-stream")
		if sse.status != http.StatusOK || !strings.Contains(string(sse.body), "event: execution.completed") {
			t.Errorf("event stream by link: %s", sse)
		}
		res := c.do(t, http.MethodGet, base+a.Links.Result, "", "")
		var snap protocol.Snapshot
		if res.status != http.StatusOK || json.Unmarshal(res.body, &snap) != nil || snap.ID != a.ID || len(snap.Output) != 1 ||
			snap.Output[0].Text != "follow me" {
			t.Errorf("result by link: %s", res)
		}

		refused := map[string]string{
			"events of another execution":    base + withToken(other.Links.Events, tok),
			"result of another execution":    base + withToken(other.Links.Result, tok),
			"events, altered by one byte":    base + withToken(a.Links.Events, alterOneByte(tok)),
			"result, altered by one byte":    base + withToken(a.Links.Result, alterOneByte(tok)),
			"events, token cut short":        base + withToken(a.Links.Events, tok[:len(tok)-1]),
			"status with the token":          base + a.Links.Self + "?token=" + tok,
			"the other's status, with token": base + other.Links.Self + "?token=" + tok,
		}
		for what, u := range refused {
			wantError(t, what, c.do(t, http.MethodGet, u, "", "", "Accept", "application/json"),
				http.StatusUnauthorized, protocol.CodeUnauthenticated)
		}
		wantError(t, "cancel with the token", c.do(t, http.MethodPost, base+a.Links.Cancel+"?token="+tok, "", ""),
			http.StatusUnauthorized, protocol.CodeUnauthenticated)
		// A token parameter is judged alone, whatever the Authorization header says.
		wantError(t, "an altered token with alice's bearer token",
			c.do(t, http.MethodGet, base+withToken(a.Links.Events, alterOneByte(tok)), alice, "", "Accept", "application/json"),
			http.StatusUnauthorized, protocol.CodeUnauthenticated)
	})

	t.Run("e: the per-principal limit refuses alice's third execution, not bob's", func(t *testing.T) {
		var ids []string
		for range 2 {
			a := c.submit(t, base, alice, stallBody)
			ids = append(ids, a.ID)
		}
		for _, id := range ids {
			c.waitRunning(t, base, alice, id)
		}
		r := c.do(t, http.MethodPost, base+"/v1/executions", alice, stallBody)
		wantError(t, "alice's third", r, http.StatusTooManyRequests, protocol.CodeRateLimited)
		if r.err != nil && (!r.err.Retryable || r.err.RetryAfterMs <= 0) {
			t.Errorf("429 %+v: want retryable with retry_after_ms", r.err)
		}
		if s, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || s <= 0 {
			t.Errorf("429 with Retry-After %q", r.header.Get("Retry-After"))
		}
		// Other principals, in alice's namespace or not, are unaffected.
		bobs := c.submit(t, base, bob, chatBody("bob is not limited"))
		carols := c.submit(t, base, carol, stallBody)
		for _, id := range ids {
			if r := c.do(t, http.MethodPost, base+"/v1/executions/"+id+"/cancel", alice, ""); r.status != http.StatusAccepted {
				t.Errorf("cancel %s: %s", id, r)
			}
			c.waitTerminal(t, base, alice, id)
		}
		if r := c.do(t, http.MethodPost, base+"/v1/executions/"+carols.ID+"/cancel", carol, ""); r.status != http.StatusAccepted {
			t.Errorf("cancel carol's %s: %s", carols.ID, r)
		}
		c.waitTerminal(t, base, carol, carols.ID)
		c.waitTerminal(t, base, bob, bobs.ID)
		// Her slots are free again.
		again := c.submit(t, base, alice, chatBody("after the limit"))
		c.waitTerminal(t, base, alice, again.ID)
	})

	t.Run("f: /metrics is TLS and RBAC-protected", func(t *testing.T) {
		scraper := c.secret("scraper's token", w.token(t, callersNamespace, "scraper"))
		metrics := "https://" + sb.metrics + "/metrics"
		rec := &recorder{next: &http.Transport{
			//nolint:gosec // G402: the metrics server's certificate is self-signed, as kubebuilder scaffolds it.
			TLSClientConfig:   &tls.Config{InsecureSkipVerify: true},
			ForceAttemptHTTP2: true,
		}}
		hc := &http.Client{Transport: rec, Timeout: 30 * time.Second}
		get := func(token string) reply {
			req, _ := http.NewRequest(http.MethodGet, metrics, nil)
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatalf("GET /metrics: %v", err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			return reply{status: resp.StatusCode, header: resp.Header, body: body}
		}
		if r := get(""); r.status != http.StatusUnauthorized {
			t.Errorf("no token: %d, want 401", r.status)
		}
		// A token the API server does not accept (here: minted for switchboard, not for
		// the API server) is refused with 401, like no token at all.
		if r := get(alice); r.status != http.StatusUnauthorized || r.header.Get("WWW-Authenticate") == "" {
			t.Errorf("alice's switchboard token (another audience than the API server's): %d, want 401 with a challenge", r.status)
		}
		if r := get(aliceAPI); r.status != http.StatusForbidden {
			t.Errorf("alice's token, no metrics-reader role: %d, want 403", r.status)
		}
		r := get(scraper)
		if r.status != http.StatusOK || !strings.Contains(string(r.body), "controller_runtime_reconcile_total") {
			t.Errorf("the scraper's token: %d, want 200 with the manager's metrics", r.status)
		}
		for _, who := range []string{"system:serviceaccount", "alice", "exe_"} {
			if strings.Contains(string(r.body), who) {
				t.Errorf("/metrics holds %q", who)
			}
		}
		// Plain HTTP is not served.
		if resp, err := http.Get("http://" + sb.metrics + "/metrics"); err == nil {
			if resp.StatusCode == http.StatusOK {
				t.Error("/metrics answers plain HTTP")
			}
			resp.Body.Close()
		}
		if found := secretsIn(rec.String(), c.secretList()); len(found) > 0 {
			t.Errorf("/metrics responses hold %v", found)
		}
	})

	t.Run("g: a ServiceAccount created again under a deleted one's name inherits nothing", func(t *testing.T) {
		ctx := t.Context()
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: teamA, Name: "phoenix"}}
		if err := w.client.Create(ctx, sa.DeepCopy()); err != nil {
			t.Fatal(err)
		}
		if err := w.client.Create(ctx, roleBinding(teamA, "phoenix-executor", "switchboard-executor", teamA, "phoenix")); err != nil {
			t.Fatal(err)
		}
		// The runtime caches a denial for 10 s: ask it only once the API server's RBAC
		// has seen the binding.
		eventually(t, 10*time.Second, "phoenix's binding", func() bool {
			review, err := w.admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User:               "system:serviceaccount:" + teamA + ":phoenix",
				ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: teamA, Verb: "create", Group: "ai.switchboard.dev", Resource: "executions"},
			}}, metav1.CreateOptions{})
			return err == nil && review.Status.Allowed
		})
		first := c.secret("phoenix's token", w.token(t, teamA, "phoenix", callerAudience))
		body, key := chatBody("before the deletion"), "Idempotency-Key"
		old := c.submit(t, base, first, body, key, "phoenix-1")
		c.waitTerminal(t, base, first, old.ID)

		if err := w.client.Delete(ctx, sa.DeepCopy()); err != nil {
			t.Fatal(err)
		}
		eventually(t, 10*time.Second, "phoenix created again", func() bool {
			return w.client.Create(ctx, sa.DeepCopy()) == nil
		})
		second := c.secret("the second phoenix's token", w.token(t, teamA, "phoenix", callerAudience))
		for _, req := range []struct{ method, path string }{
			{http.MethodGet, ""}, {http.MethodGet, "/result"}, {http.MethodGet, "/events"}, {http.MethodPost, "/cancel"},
		} {
			wantError(t, "the second phoenix: "+req.method+" "+req.path+" of the first's",
				c.do(t, req.method, base+"/v1/executions/"+old.ID+req.path, second, "", "Accept", "application/json"),
				http.StatusNotFound, protocol.CodeNotFound)
		}
		// Its idempotency keys are its own: the first's key makes a new execution.
		again := c.submit(t, base, second, body, key, "phoenix-1")
		if again.ID == old.ID {
			t.Errorf("the second phoenix replayed the first's execution %s", old.ID)
		}
		c.waitTerminal(t, base, second, again.ID)
	})

	t.Run("the Go client follows the token file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "token")
		if err := os.WriteFile(path, []byte(alice+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		gc, err := client.New(base, client.WithTokenFile(path), client.WithHTTPClient(c.http))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		acc, err := gc.Submit(ctx, textRequest("chat", "from the go client"))
		if err != nil {
			t.Fatal(err)
		}
		events := follow(t, ctx, gc, acc.ID)
		if got := types(events); len(got) == 0 || got[len(got)-1] != string(protocol.EventCompleted) {
			t.Errorf("events %v", got)
		}
		snap, err := gc.FollowResult(ctx, acc.ID)
		if err != nil || snap.Status != protocol.StatusCompleted || len(snap.Output) != 1 || snap.Output[0].Text != "from the go client" {
			t.Errorf("FollowResult: %+v, %v", snap, err)
		}
		// A rotated token is picked up: bob's now, who cannot see alice's execution.
		bobRotated := c.secret("bob's second token", w.token(t, teamB, "bob", callerAudience))
		if err := os.WriteFile(path+".new", []byte(bobRotated), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".new", path); err != nil {
			t.Fatal(err)
		}
		_, err = gc.Get(ctx, acc.ID)
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Code() != protocol.CodeNotFound {
			t.Errorf("after the rotation to bob's token: %v, want not_found", err)
		}
		// A token file that cannot be read fails the call before anything is sent.
		gone, err := client.New(base, client.WithTokenFile(filepath.Join(t.TempDir(), "missing")), client.WithHTTPClient(c.http))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := gone.Submit(ctx, textRequest("chat", "x")); err == nil {
			t.Error("a missing token file: Submit succeeded")
		}
	})

	t.Run("the shipped RBAC suffices: no request of the manager was forbidden", func(t *testing.T) {
		// The status writes and the reviews above succeeded; nothing else the manager
		// did (Events, watches) was refused either.
		for n, line := range strings.Split(sb.out.String(), "\n") {
			if strings.Contains(line, "forbidden") {
				t.Errorf("output line %d: %.400s", n+1, line)
			}
		}
	})

	t.Run("h: no credential in the output or in any response", func(t *testing.T) {
		out := sb.out.String()
		// Not vacuous: the binary logged at its most verbose level (asked for 10, capped
		// at 7: client-go's request and response bodies, V(8), which would hold Secrets,
		// are never logged), and the submissions' links did hold tokens.
		if !strings.Contains(out, `"level":"debug"`) {
			t.Error("the output lacks debug lines; is the log level verbose?")
		}
		if strings.Contains(out, `"msg":"Request Body"`) || strings.Contains(out, `"msg":"Response Body"`) {
			t.Error("the output holds API bodies: the verbosity cap does not hold")
		}
		if c.rec.accepted == 0 || len(c.secretList()) < 10 {
			t.Errorf("the canary saw %d submissions and %d secrets", c.rec.accepted, len(c.secretList()))
		}
		c.canary(t, "switchboard", out)
		c.canary(t, "demo provider", w.providerOut.String())
	})
}

// TestClusterStreamLinkExpiry: a signed link stops working at the end of
// --stream-token-ttl, while the bearer token keeps reading.
func TestClusterStreamLinkExpiry(t *testing.T) {
	t.Parallel()
	w := cluster(t)
	sb := startInCluster(t, w, "short-links", "--stream-token-ttl", "2s")
	base := "http://" + sb.api
	c := newAuthClient()
	c.secret("the manager's token", w.managerToken)
	alice := c.secret("alice's token", w.token(t, teamA, "alice", callerAudience))

	var a accepted
	eventually(t, 10*time.Second, "team-a's chat model", func() bool {
		r := c.do(t, http.MethodPost, base+"/v1/executions", alice, chatBody("short-lived link"))
		if r.status == http.StatusUnprocessableEntity {
			return false
		}
		if r.status != http.StatusAccepted || json.Unmarshal(r.body, &a) != nil {
			t.Fatalf("submit: %s", r)
		}
		return true
	})
	submitted := time.Now()
	for _, link := range []string{a.Links.Events, a.Links.Result} {
		tok, err := linkToken(link)
		if err != nil {
			t.Fatal(err)
		}
		c.secret("stream token", tok)
	}
	c.waitTerminal(t, base, alice, a.ID)
	if r := c.do(t, http.MethodGet, base+a.Links.Events, "", "", "Accept", "application/json"); r.status != http.StatusOK {
		if time.Since(submitted) < 2*time.Second {
			t.Fatalf("events by link within its lifetime: %s", r)
		}
		t.Logf("events by link already expired (%s after submission): %s", time.Since(submitted), r)
	}
	time.Sleep(time.Until(submitted.Add(2*time.Second + 1100*time.Millisecond))) // expiry is in whole seconds
	for _, link := range []string{a.Links.Events, a.Links.Result} {
		wantError(t, "an expired link "+pathOf(link), c.do(t, http.MethodGet, base+link, "", "", "Accept", "application/json"),
			http.StatusUnauthorized, protocol.CodeUnauthenticated)
	}
	// The same expired token with alice's bearer token: the token parameter alone decides.
	wantError(t, "an expired link with a bearer token", c.do(t, http.MethodGet, base+a.Links.Events, alice, "", "Accept", "application/json"),
		http.StatusUnauthorized, protocol.CodeUnauthenticated)
	// The bearer token reads on.
	if r := c.do(t, http.MethodGet, base+pathOf(a.Links.Events), alice, "", "Accept", "application/json"); r.status != http.StatusOK {
		t.Errorf("events with the bearer token: %s", r)
	}
	c.canary(t, "switchboard", sb.out.String())
}

// TestStaticAuth covers --auth=static in standalone mode: the tokens file maps tokens to
// principals and namespaces and is reloaded on change; a removed token is refused within
// 2 s.
func TestStaticAuth(t *testing.T) {
	c := newAuthClient()
	newToken := func(what string) string {
		b := make([]byte, 16)
		if _, err := rand.Read(b); err != nil {
			t.Fatal(err)
		}
		return c.secret(what, hex.EncodeToString(b))
	}
	alice, bob, outsider, dave, broken := newToken("alice's token"), newToken("bob's token"),
		newToken("outsider's token"), newToken("dave's token"), newToken("a token on an invalid line")
	path := filepath.Join(t.TempDir(), "tokens")
	write := func(content string) {
		t.Helper()
		// Replaced as a whole, as a Secret volume or an editor does.
		if err := os.WriteFile(path+".tmp", []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			t.Fatal(err)
		}
	}
	write(fmt.Sprintf("# callers of the e2e models\n%s,alice,e2e\n%s, bob , e2e\n%s,outsider,elsewhere\n", alice, bob, outsider))

	e := setup(t, "--auth=static", "--auth-tokens-file", path, "--zap-log-level", "10")
	base := "http://" + e.api

	a := c.submit(t, base, alice, chatBody("static alice"))
	if st := c.waitTerminal(t, base, alice, a.ID); st.Status != protocol.StatusCompleted {
		t.Errorf("alice's execution: %s", st.Status)
	}
	if _, err := linkToken(a.Links.Events); err != nil {
		t.Errorf("links.events in static mode: %v", err)
	}
	if r := c.do(t, http.MethodGet, base+a.Links.Result, "", ""); r.status != http.StatusOK {
		t.Errorf("result by link: %s", r)
	}
	wantError(t, "no token", c.do(t, http.MethodPost, base+"/v1/executions", "", chatBody("x")),
		http.StatusUnauthorized, protocol.CodeUnauthenticated)
	wantError(t, "an unknown token", c.do(t, http.MethodPost, base+"/v1/executions", dave, chatBody("x")),
		http.StatusUnauthorized, protocol.CodeUnauthenticated)
	wantError(t, "a principal whose namespaces hold no models", c.do(t, http.MethodPost, base+"/v1/executions", outsider, chatBody("x")),
		http.StatusForbidden, protocol.CodePermissionDenied)
	wantError(t, "the outsider reads alice's", c.do(t, http.MethodGet, base+"/v1/executions/"+a.ID, outsider, ""),
		http.StatusNotFound, protocol.CodeNotFound)

	// Revoke alice's token: refused within 2 s.
	write(fmt.Sprintf("%s,bob,e2e\n%s,outsider,elsewhere\n", bob, outsider))
	revoked := time.Now()
	eventually(t, 2*time.Second, "alice's removed token refused", func() bool {
		return c.do(t, http.MethodPost, base+"/v1/executions", alice, chatBody("x")).status == http.StatusUnauthorized
	})
	t.Logf("a removed token was refused %s after the file changed", time.Since(revoked).Round(time.Millisecond))
	if r := c.do(t, http.MethodGet, base+"/v1/executions/"+a.ID, alice, ""); r.status != http.StatusUnauthorized {
		t.Errorf("alice's removed token reads: %s", r)
	}

	// Bob uses the models of e2e, as alice did, but reads none of her executions: his
	// line has no grant read.
	wantError(t, "bob reads alice's", c.do(t, http.MethodGet, base+"/v1/executions/"+a.ID, bob, ""),
		http.StatusNotFound, protocol.CodeNotFound)

	// Add dave's, rewriting the file in place this time.
	if err := os.WriteFile(path, []byte(fmt.Sprintf("%s,bob,e2e\n%s,outsider,elsewhere\n%s,dave,*,read\n", bob, outsider, dave)), 0o600); err != nil {
		t.Fatal(err)
	}
	added := time.Now()
	eventually(t, 2*time.Second, "dave's new token accepted", func() bool {
		return c.do(t, http.MethodGet, base+"/v1/executions/"+a.ID, dave, "").status == http.StatusOK // * with read may read all
	})
	t.Logf("a new token was accepted %s after the file changed", time.Since(added).Round(time.Millisecond))
	d := c.submit(t, base, dave, chatBody("static dave"))
	c.waitTerminal(t, base, dave, d.ID)
	b := c.submit(t, base, bob, chatBody("static bob"))
	c.waitTerminal(t, base, bob, b.ID)

	// An invalid line (here a token without principal): the previous tokens stay in
	// force, the problem is logged without quoting the line.
	write(fmt.Sprintf("%s,bob,e2e\n%s\n", bob, broken))
	eventually(t, 3*time.Second, "the invalid file logged", func() bool {
		return strings.Contains(e.runtime.String(), "Invalid tokens file")
	})
	if r := c.do(t, http.MethodGet, base+"/v1/executions/"+a.ID, dave, ""); r.status != http.StatusOK {
		t.Errorf("dave's token after an invalid file: %s", r)
	}
	wantError(t, "the token of the invalid line", c.do(t, http.MethodPost, base+"/v1/executions", broken, chatBody("x")),
		http.StatusUnauthorized, protocol.CodeUnauthenticated)

	if !strings.Contains(e.runtime.String(), "Tokens file reloaded") {
		t.Error("the output lacks the reload lines; is the log level debug?")
	}
	c.canary(t, "switchboard", e.runtime.String())
}

// TestStaticMetrics: in static mode /metrics answers only a token whose line has the
// grant metrics (spec/authentication.md, "Metrics").
func TestStaticMetrics(t *testing.T) {
	c := newAuthClient()
	scraper, caller := c.secret("the scraper's token", "tok-scraper-"+rand.Text()), c.secret("a caller's token", "tok-caller-"+rand.Text())
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte(scraper+",prometheus,monitoring,metrics\n"+caller+",alice,e2e,read,cancel\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	metricsAddr := freeAddr(t)
	e := setup(t, "--auth=static", "--auth-tokens-file", path, "--metrics-bind-address", metricsAddr)
	scrape := func(token string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, "http://"+metricsAddr+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for what, tc := range map[string]struct {
		token  string
		status int
	}{
		"no token":                  {"", http.StatusUnauthorized},
		"an unknown token":          {"tok-nobody", http.StatusUnauthorized},
		"a token without the grant": {caller, http.StatusForbidden},
		"the scraper's token":       {scraper, http.StatusOK},
	} {
		status, body := scrape(tc.token)
		if status != tc.status {
			t.Errorf("%s: %d, want %d", what, status, tc.status)
		}
		if served := strings.Contains(body, "switchboard_"); served != (status == http.StatusOK) {
			t.Errorf("%s: metrics served: %v", what, served)
		}
	}
	c.canary(t, "switchboard", e.runtime.String())
}
