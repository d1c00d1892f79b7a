package httpapi_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"

	"github.com/switchboard-dev/switchboard/runtime/auth"
	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/eventstore/memory"
	"github.com/switchboard-dev/switchboard/runtime/httpapi"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// Callers in static mode (spec/authentication.md): alice may use team-a, bob team-b,
// carol both, and she may read and cancel the executions of others there; dave may use
// team-a, like alice, without grants. The tokens are canaries: none may appear in any
// answer.
const (
	aliceToken = "tok-alice-canary-0123456789"
	bobToken   = "tok-bob-canary-0123456789"
	carolToken = "tok-carol-canary-0123456789"
	daveToken  = "tok-dave-canary-0123456789"
)

func inNamespace(ns, name string, abilities ...string) routing.Deployment {
	d := textModel(name)
	d.Ref.Namespace = ns
	if len(abilities) > 0 {
		d.Abilities = abilities
	}
	return d
}

// newAuthEnv is an environment with static authentication and stream tokens.
func newAuthEnv(t *testing.T, opts ...envOption) *env {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens")
	lines := aliceToken + ",alice,team-a\n" + bobToken + ",bob,team-b\n" + carolToken + ",carol,team-a;team-b,read,cancel\n" +
		daveToken + ",dave,team-a\n"
	if err := os.WriteFile(path, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	static, err := auth.Static(t.Context(), path, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	// The keys of stream tokens live in a store of their own; the runtime keeps them in
	// the EventStore.
	tokens, err := auth.NewStreamTokens(t.Context(), auth.StreamTokenConfig{Store: memory.New(), TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	opts = append([]envOption{
		withDeployments(inNamespace("team-a", "small"), inNamespace("team-b", "small"),
			inNamespace("team-b", "summarizer", "summarize")),
		withAPI(func(c *httpapi.Config) { c.Auth, c.StreamTokens = &static, tokens }),
	}, opts...)
	return newEnv(t, opts...)
}

type answer struct {
	status int
	header http.Header
	body   []byte
}

// call makes one request as the caller with token (none if empty).
func (e *env) call(t *testing.T, method, path, token, body string, header ...string) answer {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, e.srv.URL+path, rd)
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
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, canary := range []string{aliceToken, bobToken, carolToken, daveToken} {
		if bytes.Contains(b, []byte(canary)) {
			t.Errorf("%s %s: a caller's token appears in the answer", method, path)
		}
	}
	return answer{resp.StatusCode, resp.Header, b}
}

func (a answer) code(t *testing.T) protocol.Code {
	t.Helper()
	var body protocol.ErrorBody
	if err := json.Unmarshal(a.body, &body); err != nil || body.Error == nil {
		t.Fatalf("status %d without an error body: %s", a.status, a.body)
	}
	return body.Error.Code
}

type accepted struct {
	ID    string `json:"id"`
	Links struct {
		Events string `json:"events"`
		Result string `json:"result"`
	} `json:"links"`
}

func (e *env) submitAs(t *testing.T, token, ability string, header ...string) accepted {
	t.Helper()
	a := e.call(t, http.MethodPost, "/v1/executions", token, `{"ability":"`+ability+`","input":[{"type":"text","text":"hi"}]}`, header...)
	if a.status != http.StatusAccepted {
		t.Fatalf("submit as %s: %d %s", token[:7], a.status, a.body)
	}
	var acc accepted
	if err := json.Unmarshal(a.body, &acc); err != nil {
		t.Fatal(err)
	}
	return acc
}

func TestAuthentication(t *testing.T) {
	e := newAuthEnv(t)
	body := `{"ability":"chat","input":[{"type":"text","text":"hi"}]}`
	for _, token := range []string{"", "not-a-known-token"} {
		a := e.call(t, http.MethodPost, "/v1/executions", token, body)
		if a.status != http.StatusUnauthorized || a.code(t) != protocol.CodeUnauthenticated ||
			!strings.HasPrefix(a.header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("token %q: %d %s %q, want 401 unauthenticated with a Bearer challenge", token, a.status, a.body, a.header.Get("WWW-Authenticate"))
		}
	}
	if a := e.call(t, http.MethodGet, "/v1/executions/exe_x", "", ""); a.status != http.StatusUnauthorized {
		t.Errorf("status read without a token: %d, want 401", a.status)
	}
	if e.calls.Load() != 0 {
		t.Error("an unauthenticated request reached the provider")
	}
}

// Routing sees only the caller's namespaces: an ability served only elsewhere is
// answered as if nothing served it, naming nothing of the other namespace.
func TestRoutingSeesOnlyTheCallersNamespaces(t *testing.T) {
	e := newAuthEnv(t)
	acc := e.submitAs(t, aliceToken, "chat")
	e.waitDone(t, acc.ID, aliceToken)
	var status protocol.ExecutionStatus
	st := e.call(t, http.MethodGet, "/v1/executions/"+acc.ID, aliceToken, "")
	if err := json.Unmarshal(st.body, &status); err != nil || status.Route == nil || !strings.HasPrefix(status.Route.Deployment, "team-a/") {
		t.Errorf("alice's execution ran on %+v (%v), want team-a's model", status.Route, err)
	}

	a := e.call(t, http.MethodPost, "/v1/executions", aliceToken, `{"ability":"summarize","input":[{"type":"text","text":"hi"}]}`)
	if a.status != http.StatusUnprocessableEntity || a.code(t) != protocol.CodeUnsupportedCapability ||
		bytes.Contains(a.body, []byte("team-b")) || bytes.Contains(a.body, []byte("summarizer")) {
		t.Errorf("ability served only in team-b: %d %s, want 422 naming nothing of team-b", a.status, a.body)
	}
	if acc := e.submitAs(t, bobToken, "summarize"); acc.ID == "" {
		t.Error("bob cannot use his own namespace's model")
	}
}

// A caller allowed in no namespace that holds models gets 403.
func TestCallerWithoutNamespaceIsDenied(t *testing.T) {
	e := newAuthEnv(t, withDeployments(inNamespace("team-c", "small")))
	a := e.call(t, http.MethodPost, "/v1/executions", aliceToken, `{"ability":"chat","input":[{"type":"text","text":"hi"}]}`)
	if a.status != http.StatusForbidden || a.code(t) != protocol.CodePermissionDenied {
		t.Errorf("%d %s, want 403 permission_denied", a.status, a.body)
	}
}

// An execution belongs to its creator: another caller gets 404 for its status, result,
// events and cancel, unless allowed to read (get) or cancel (update) in its namespace;
// using the models of that namespace (create) is not enough.
func TestExecutionsAreIsolated(t *testing.T) {
	e := newAuthEnv(t)
	e.setScript(hang)
	acc := e.submitAs(t, aliceToken, "chat")
	base := "/v1/executions/" + acc.ID
	for _, r := range []struct{ method, path string }{
		{http.MethodGet, base}, {http.MethodGet, base + "/result"}, {http.MethodGet, base + "/events"},
		{http.MethodPost, base + "/cancel"},
	} {
		for name, token := range map[string]string{"bob": bobToken, "dave (team-a without grants)": daveToken} {
			if a := e.call(t, r.method, r.path, token, "", "Accept", "application/json"); a.status != http.StatusNotFound || a.code(t) != protocol.CodeNotFound {
				t.Errorf("%s %s %s: %d %s, want 404", name, r.method, r.path, a.status, a.body)
			}
		}
		if a := e.call(t, r.method, r.path, carolToken, "", "Accept", "application/json"); a.status >= 300 {
			t.Errorf("carol (allowed in team-a) %s %s: %d %s, want it served", r.method, r.path, a.status, a.body)
		}
	}
	e.waitDone(t, acc.ID, aliceToken)
}

// Idempotency keys are scoped to the principal: the same key from two callers makes two
// executions.
func TestIdempotencyKeysPerPrincipal(t *testing.T) {
	e := newAuthEnv(t)
	a := e.submitAs(t, aliceToken, "chat", "Idempotency-Key", "shared-key")
	c := e.submitAs(t, carolToken, "chat", "Idempotency-Key", "shared-key")
	if a.ID == c.ID {
		t.Errorf("two principals' submissions with one key share execution %s", a.ID)
	}
	if again := e.submitAs(t, aliceToken, "chat", "Idempotency-Key", "shared-key"); again.ID != a.ID {
		t.Errorf("alice's replay gave %s, want her execution %s", again.ID, a.ID)
	}
}

// The signed links of the 202 body open that execution's events and result without an
// Authorization header, and nothing else.
func TestStreamTokenLinks(t *testing.T) {
	e := newAuthEnv(t)
	acc := e.submitAs(t, aliceToken, "chat")
	other := e.submitAs(t, aliceToken, "chat")
	e.waitDone(t, acc.ID, aliceToken)
	for _, link := range []string{acc.Links.Events, acc.Links.Result} {
		u, err := url.Parse(link)
		if err != nil || u.Query().Get("token") == "" {
			t.Fatalf("link %q has no token", link)
		}
		if a := e.call(t, http.MethodGet, link, "", "", "Accept", "application/json"); a.status != http.StatusOK {
			t.Errorf("GET %s without Authorization: %d %s, want 200", u.Path, a.status, a.body)
		}
		token := u.Query().Get("token")
		otherPath := strings.Replace(u.Path, acc.ID, other.ID, 1) + "?token=" + token
		if a := e.call(t, http.MethodGet, otherPath, "", "", "Accept", "application/json"); a.status != http.StatusUnauthorized {
			t.Errorf("token used for another execution: %d, want 401", a.status)
		}
		for i := range token {
			altered := []byte(token)
			altered[i] ^= 0x01
			if a := e.call(t, http.MethodGet, u.Path+"?token="+url.QueryEscape(string(altered)), "", "", "Accept", "application/json"); a.status != http.StatusUnauthorized {
				t.Fatalf("token altered at byte %d: %d, want 401", i, a.status)
			}
		}
	}
	// The token reads; it does not cancel or read the status.
	u, _ := url.Parse(acc.Links.Events)
	q := "?token=" + u.Query().Get("token")
	for _, r := range []struct{ method, path string }{{http.MethodGet, "/v1/executions/" + acc.ID + q}, {http.MethodPost, "/v1/executions/" + acc.ID + "/cancel" + q}} {
		if a := e.call(t, r.method, r.path, "", ""); a.status != http.StatusUnauthorized {
			t.Errorf("%s %s with only a stream token: %d, want 401", r.method, r.path, a.status)
		}
	}
}

// waitDone waits until execution id is terminal, as token's caller sees it.
func (e *env) waitDone(t *testing.T, id, token string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	for ctx.Err() == nil {
		a := e.call(t, http.MethodGet, "/v1/executions/"+id, token, "")
		var st protocol.ExecutionStatus
		if a.status == http.StatusOK && json.Unmarshal(a.body, &st) == nil &&
			(st.Status == protocol.StatusCompleted || st.Status == protocol.StatusFailed) {
			return
		}
		if a.status == http.StatusOK && st.Status == protocol.StatusRunning {
			e.call(t, http.MethodPost, "/v1/executions/"+id+"/cancel", token, "")
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("execution %s did not end", id)
}

// A link's token names no principal: decoded, it holds the key, the expiry and the MAC
// only, so a URL in a browser's history or a proxy's log does not tell who made it. The
// server reads the owner from the execution.
func TestStreamTokenHoldsNoPrincipal(t *testing.T) {
	var gets getCounter
	e := newAuthEnv(t, withAPIStore(gets.wrap))
	acc := e.submitAs(t, carolToken, "chat")
	for _, link := range []string{acc.Links.Events, acc.Links.Result} {
		u, err := url.Parse(link)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := base64.RawURLEncoding.DecodeString(u.Query().Get("token"))
		if err != nil {
			t.Fatalf("token of %s: %v", u.Path, err)
		}
		if bytes.Contains(raw, []byte("carol")) {
			t.Errorf("the token of %s holds the principal: %q", u.Path, raw)
		}
		// The owner comes from the execution's record, which the endpoint reads anyway:
		// one Get per request.
		before := gets.n.Load()
		if a := e.call(t, http.MethodGet, link, "", "", "Accept", "application/json"); a.status != http.StatusOK {
			t.Errorf("GET %s by link: %d %s", u.Path, a.status, a.body)
		}
		if n := gets.n.Load() - before; n != 1 {
			t.Errorf("GET %s by link read the status %d times, want once", u.Path, n)
		}
	}
	// A token for an execution that does not exist is refused like an altered one, and
	// one that is malformed or expired costs no store read.
	u, _ := url.Parse(acc.Links.Events)
	token := u.Query().Get("token")
	if a := e.call(t, http.MethodGet, "/v1/executions/exe_missing/events?token="+token, "", "", "Accept", "application/json"); a.status != http.StatusUnauthorized || a.code(t) != protocol.CodeUnauthenticated {
		t.Errorf("token for a missing execution: %d %s, want 401", a.status, a.body)
	}
	before := gets.n.Load()
	if a := e.call(t, http.MethodGet, u.Path+"?token="+token[:len(token)-1], "", "", "Accept", "application/json"); a.status != http.StatusUnauthorized {
		t.Errorf("truncated token: %d, want 401", a.status)
	}
	if n := gets.n.Load() - before; n != 0 {
		t.Errorf("a malformed token cost %d status reads", n)
	}
	e.waitDone(t, acc.ID, carolToken)
}

// getCounter counts the status reads of the store it wraps.
type getCounter struct {
	n atomic.Int64
}

func (c *getCounter) wrap(s httpapi.Store) httpapi.Store { return &countedGets{s, c} }

type countedGets struct {
	httpapi.Store
	c *getCounter
}

func (s *countedGets) Get(ctx context.Context, id string) (eventstore.Status, error) {
	s.c.n.Add(1)
	return s.Store.Get(ctx, id)
}

// spyAuthorizer records the questions a request asks and how many are in flight at once.
// Each question waits, up to 200 ms, until wantConcurrent are in flight, so that
// questions asked together are seen together and questions asked one after the other
// are not.
type spyAuthorizer struct {
	next           auth.Authorizer
	wantConcurrent int
	mu             sync.Mutex
	asked          []string // "verb namespace"
	inFlight       int
	maxInFlight    int
}

func (s *spyAuthorizer) Allowed(ctx context.Context, p *auth.Principal, verb, ns string) (bool, error) {
	s.mu.Lock()
	s.asked = append(s.asked, verb+" "+ns)
	s.inFlight++
	s.maxInFlight = max(s.maxInFlight, s.inFlight)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inFlight--
		s.mu.Unlock()
	}()
	for deadline := time.Now().Add(200 * time.Millisecond); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		s.mu.Lock()
		enough := s.inFlight >= s.wantConcurrent
		s.mu.Unlock()
		if enough {
			break
		}
	}
	return s.next.Allowed(ctx, p, verb, ns)
}

func (s *spyAuthorizer) questions() (asked []string, maxInFlight int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(slices.Values(s.asked)), s.maxInFlight
}

// A submission asks the authorizer only about the namespaces of the models that serve
// its ability, all at once: not about every namespace of the table, one after the other.
func TestSubmissionAsksAboutCandidateNamespacesOnly(t *testing.T) {
	spy := &spyAuthorizer{wantConcurrent: 2}
	e := newAuthEnv(t,
		withDeployments(inNamespace("team-a", "small"), inNamespace("team-b", "small"),
			inNamespace("team-c", "translator", "translate"), inNamespace("team-d", "translator", "translate"),
			inNamespace("team-e", "translator", "translate"), inNamespace("team-f", "summarizer", "summarize")),
		withAPI(func(c *httpapi.Config) {
			a := *c.Auth
			spy.next, a.Authorizer = a.Authorizer, spy
			c.Auth = &a
		}))
	acc := e.submitAs(t, carolToken, "chat") // carol may use team-a and team-b
	e.waitDone(t, acc.ID, carolToken)
	asked, inFlight := spy.questions()
	if diff := cmp.Diff([]string{"create team-a", "create team-b"}, asked); diff != "" {
		t.Errorf("questions of a chat submission (-want +got):\n%s", diff)
	}
	if inFlight != 2 {
		t.Errorf("%d questions in flight at most, want both at once", inFlight)
	}
}

// uidAuth authenticates the tokens of principals by name and uid, as a TokenReview
// does, and lets everyone create executions in namespace "ai" and do nothing else.
type uidAuth map[string]auth.Principal

func (a uidAuth) Authenticate(r *http.Request) (*auth.Principal, error) {
	token, _ := auth.BearerToken(r)
	p, ok := a[token]
	if !ok {
		return nil, auth.ErrUnauthenticated
	}
	return &p, nil
}

func (uidAuth) Allowed(_ context.Context, p *auth.Principal, verb, ns string) (bool, error) {
	return p != nil && verb == auth.VerbCreate && ns == "ai", nil
}

// A principal deleted and created again under the same name (a ServiceAccount, with a
// new uid) owns none of its predecessor's executions, and does not share its
// idempotency keys; an execution recorded without a uid is its name's.
func TestRecreatedPrincipalOwnsNothing(t *testing.T) {
	const name = "system:serviceaccount:ai:summarizer"
	callers := uidAuth{
		"tok-old-canary-0123456789": {Name: name, UID: "8f3c0e4e-0b6e-4f57-9d1e-8a2f5b7c1d00"},
		"tok-new-canary-0123456789": {Name: name, UID: "1d2e3f40-5a6b-4c7d-8e9f-a0b1c2d3e4f5"},
		"tok-nouid-canary-01234567": {Name: name},
	}
	e := newEnv(t, withAPI(func(c *httpapi.Config) { c.Auth = &auth.Auth{Authenticator: callers, Authorizer: callers} }))
	old, recreated, noUID := "tok-old-canary-0123456789", "tok-new-canary-0123456789", "tok-nouid-canary-01234567"

	acc := e.submitAs(t, old, "chat", "Idempotency-Key", "order-4711")
	e.waitDone(t, acc.ID, old)
	base := "/v1/executions/" + acc.ID
	for who, tok := range map[string]string{"another uid": recreated, "no uid": noUID} {
		for _, r := range []struct{ method, path string }{
			{http.MethodGet, base}, {http.MethodGet, base + "/result"}, {http.MethodGet, base + "/events"},
			{http.MethodPost, base + "/cancel"},
		} {
			if a := e.call(t, r.method, r.path, tok, "", "Accept", "application/json"); a.status != http.StatusNotFound {
				t.Errorf("%s %s by the same name with %s: %d %s, want 404", r.method, r.path, who, a.status, a.body)
			}
		}
	}
	if a := e.call(t, http.MethodGet, base, old, ""); a.status != http.StatusOK {
		t.Errorf("the creator reads its execution: %d %s", a.status, a.body)
	}
	if again := e.submitAs(t, recreated, "chat", "Idempotency-Key", "order-4711"); again.ID == acc.ID {
		t.Errorf("the recreated principal replayed its predecessor's execution %s", acc.ID)
	}
	if again := e.submitAs(t, old, "chat", "Idempotency-Key", "order-4711"); again.ID != acc.ID {
		t.Errorf("the creator's replay gave %s, want %s", again.ID, acc.ID)
	}

	// Without a uid (another mode, or an execution recorded before uids were), the
	// name alone owns.
	mine := e.submitAs(t, noUID, "chat")
	e.waitDone(t, mine.ID, noUID)
	if a := e.call(t, http.MethodGet, "/v1/executions/"+mine.ID, noUID, ""); a.status != http.StatusOK {
		t.Errorf("a principal without uid reads its execution: %d %s", a.status, a.body)
	}
}

// refusingAuth fails every authentication with err.
type refusingAuth struct{ err error }

func (a refusingAuth) Authenticate(*http.Request) (*auth.Principal, error) { return nil, a.err }

func (refusingAuth) Allowed(context.Context, *auth.Principal, string, string) (bool, error) {
	return false, nil
}

// A throttled client address gets 429 and a review the replica cannot make now 503, both
// retryable with Retry-After.
func TestAuthenticationRefusedForNow(t *testing.T) {
	for _, tt := range []struct {
		err    error
		status int
		code   protocol.Code
	}{
		{auth.ErrThrottled, http.StatusTooManyRequests, protocol.CodeRateLimited},
		{fmt.Errorf("%w: too many reviews in flight", auth.ErrUnavailable), http.StatusServiceUnavailable, protocol.CodeProviderUnavailable},
	} {
		a := refusingAuth{tt.err}
		e := newEnv(t, withAPI(func(c *httpapi.Config) { c.Auth = &auth.Auth{Authenticator: a, Authorizer: a} }))
		r := e.call(t, http.MethodPost, "/v1/executions", "any-token", `{"ability":"chat","input":[{"type":"text","text":"hi"}]}`)
		var body protocol.ErrorBody
		if err := json.Unmarshal(r.body, &body); err != nil || r.status != tt.status || body.Error == nil ||
			body.Error.Code != tt.code || !body.Error.Retryable || r.header.Get("Retry-After") != "1" {
			t.Errorf("%v: %d %s, Retry-After %q; want %d %s, retryable, Retry-After 1", tt.err, r.status, r.body, r.header.Get("Retry-After"), tt.status, tt.code)
		}
	}
}

// failingSecrets is a key store that stops answering when fail is set.
type failingSecrets struct {
	auth.SecretStore
	fail atomic.Bool
}

func (f *failingSecrets) Secret(ctx context.Context, name string, candidate []byte, ttl time.Duration) ([]byte, error) {
	if f.fail.Load() {
		return nil, errors.New("the event store does not answer")
	}
	return f.SecretStore.Secret(ctx, name, candidate, ttl)
}

// TestAcceptedWithoutStreamToken: when the key of the current period cannot be read
// after the execution was created, the caller still gets its 202 — an error would make
// a retry without a key create a second execution — with links that carry no token.
func TestAcceptedWithoutStreamToken(t *testing.T) {
	keys := &failingSecrets{SecretStore: memory.New()}
	// The signer starts a day ago, so the key of today's period is not known yet.
	dayAgo := func() time.Time { return time.Now().Add(-24 * time.Hour) }
	tokens, err := auth.NewStreamTokens(t.Context(), auth.StreamTokenConfig{Store: keys, TTL: time.Minute, KeyRotation: time.Hour, Now: dayAgo})
	if err != nil {
		t.Fatal(err)
	}
	e := newAuthEnv(t, withAPI(func(c *httpapi.Config) { c.StreamTokens = tokens }))
	keys.fail.Store(true)
	creates := e.store.creates.Load()
	acc := e.submitAs(t, aliceToken, "chat")
	if strings.Contains(acc.Links.Events, "token=") || strings.Contains(acc.Links.Result, "token=") {
		t.Errorf("links %q and %q carry a token that could not be signed", acc.Links.Events, acc.Links.Result)
	}
	if n := e.store.creates.Load() - creates; n != 1 {
		t.Errorf("%d executions created, want 1", n)
	}
	if a := e.call(t, http.MethodGet, acc.Links.Events, aliceToken, "", "Accept", "application/json"); a.status != http.StatusOK {
		t.Errorf("GET %s with the caller's token: %d %s", acc.Links.Events, a.status, a.body)
	}
	e.waitDone(t, acc.ID, aliceToken)
}
