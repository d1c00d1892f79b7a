package auth_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"github.com/switchboard-dev/switchboard/runtime/auth"
)

// canary is a token that must never appear in an error or a log line.
const canary = "CANARY-7f3a9c"

// reloadBound is how soon spec/authentication.md requires a change of the tokens file to
// take effect.
const reloadBound = 2 * time.Second

func TestStaticParsesGoodFiles(t *testing.T) {
	type check struct {
		token     string
		principal string // "" means refused
		allowed   []string
		denied    []string
	}
	tests := []struct {
		name   string
		file   string
		checks []check
	}{{
		name: "comments, blank lines, spaces and CRLF",
		file: "\ufeff# callers\r\n\r\n  tok-a , alice , team-a ; team-b \r\n#tok-x,mallory,*\nt0k_b.~+/=,bob,*\n",
		checks: []check{
			{token: "tok-a", principal: "alice", allowed: []string{"team-a", "team-b"}, denied: []string{"team-c", ""}},
			{token: "t0k_b.~+/=", principal: "bob", allowed: []string{"team-a", "anything", ""}},
			{token: "#tok-x"},
			{token: "tok-x"},
		},
	}, {
		name: "a principal with two tokens",
		file: "old,alice,b;a\nnew,alice,a;b;a\n",
		checks: []check{
			{token: "old", principal: "alice", allowed: []string{"a", "b"}, denied: []string{"c"}},
			{token: "new", principal: "alice", allowed: []string{"a", "b"}},
		},
	}, {
		name:   "star among names",
		file:   "tok,ops team: élan,team-a;*\n",
		checks: []check{{token: "tok", principal: "ops team: élan", allowed: []string{"x", ""}}},
	}, {
		name:   "empty file",
		file:   "",
		checks: []check{{token: "tok"}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newStatic(t, writeFile(t, tt.file))
			for _, c := range tt.checks {
				p, err := a.Authenticator.Authenticate(bearer(c.token))
				if c.principal == "" {
					if !errors.Is(err, auth.ErrUnauthenticated) {
						t.Errorf("token %q: got %v, %v; want ErrUnauthenticated", c.token, p, err)
					}
					continue
				}
				if err != nil || p.Name != c.principal {
					t.Fatalf("token %q: got %v, %v; want principal %q", c.token, p, err, c.principal)
				}
				for _, ns := range c.allowed {
					if ok, err := a.Authorizer.Allowed(t.Context(), p, auth.VerbCreate, ns); !ok || err != nil {
						t.Errorf("%s create in %q: got %v, %v; want allowed", p.Name, ns, ok, err)
					}
					// Without grants, others' executions stay out of reach.
					for _, verb := range []string{auth.VerbGet, auth.VerbUpdate, auth.VerbMetrics} {
						if ok, err := a.Authorizer.Allowed(t.Context(), p, verb, ns); ok || err != nil {
							t.Errorf("%s %s in %q without grants: got %v, %v; want denied", p.Name, verb, ns, ok, err)
						}
					}
				}
				for _, ns := range c.denied {
					if ok, err := a.Authorizer.Allowed(t.Context(), p, auth.VerbCreate, ns); ok || err != nil {
						t.Errorf("%s create in %q: got %v, %v; want denied", p.Name, ns, ok, err)
					}
				}
			}
		})
	}
}

// The grants of a line let its principal read (read) or cancel (cancel) the executions
// of others in its namespaces, or scrape /metrics (metrics); create needs none.
func TestStaticGrants(t *testing.T) {
	a := newStatic(t, writeFile(t, "tok-owner,owner,team-a\n"+
		"tok-reader,reader,team-a;team-b,read\n"+
		"tok-canceller,canceller,team-a, cancel ,read\n"+
		"tok-ops,ops,*,read,cancel,metrics\n"+
		"tok-scraper,scraper,team-z,metrics\n"+
		"tok-reader-2,reader,team-b;team-a,read\n"))
	type decision struct {
		verb, ns string
		want     bool
	}
	for token, decisions := range map[string][]decision{
		"tok-owner": {
			{auth.VerbCreate, "team-a", true}, {auth.VerbGet, "team-a", false}, {auth.VerbUpdate, "team-a", false},
			{auth.VerbMetrics, "", false},
		},
		"tok-reader": {
			{auth.VerbCreate, "team-b", true}, {auth.VerbGet, "team-a", true}, {auth.VerbGet, "team-b", true},
			{auth.VerbGet, "team-c", false}, {auth.VerbGet, "", false}, {auth.VerbUpdate, "team-a", false},
			{auth.VerbMetrics, "", false},
		},
		"tok-reader-2": {{auth.VerbGet, "team-a", true}},
		"tok-canceller": {
			{auth.VerbGet, "team-a", true}, {auth.VerbUpdate, "team-a", true}, {auth.VerbUpdate, "team-b", false},
		},
		"tok-ops": {
			{auth.VerbCreate, "", true}, {auth.VerbGet, "any", true}, {auth.VerbUpdate, "", true},
			{auth.VerbMetrics, "", true},
		},
		"tok-scraper": {
			{auth.VerbMetrics, "", true}, {auth.VerbMetrics, "team-z", true}, {auth.VerbGet, "team-z", false},
			{auth.VerbCreate, "team-z", true},
		},
	} {
		p, err := a.Authenticator.Authenticate(bearer(token))
		if err != nil {
			t.Fatalf("%s: %v", token, err)
		}
		for _, d := range decisions {
			if ok, err := a.Authorizer.Allowed(t.Context(), p, d.verb, d.ns); ok != d.want || err != nil {
				t.Errorf("%s %s in %q: got %v, %v; want %v", p.Name, d.verb, d.ns, ok, err, d.want)
			}
		}
	}
}

func TestStaticRejectsBadFiles(t *testing.T) {
	tests := []struct {
		name string
		file string
		want string // after "tokens file <path>: "
	}{
		{"two fields", "# header\n" + canary + ",alice\n", "line 2: want at least 3 comma-separated fields token,principal,namespaces[,grant…], got 2"},
		{"four fields", canary + ",alice,bob,team-a\n", "line 1: field 4 is not a grant (read, cancel or metrics)"},
		{"comma in the principal", "\n\n" + canary + ",ali,ce,team-a\n", "line 3: field 4 is not a grant"},
		{"token in the grant column", "tok,alice,team-a,read," + canary + "\n", "line 1: field 5 is not a grant"},
		{"upper-case grant", canary + ",alice,team-a,Read\n", "line 1: field 4 is not a grant"},
		{"empty grant", canary + ",alice,team-a,\n", "line 1: field 4 is empty"},
		{"repeated grant", canary + ",alice,team-a,read,cancel, read\n", "line 1: field 6 repeats a grant"},
		{"a principal's lines with other grants", "tok1,alice,a,read\ntok2,alice,a\n", "line 2: the principal is also on line 1, with other namespaces or grants"},
		{"empty token", " ,alice,team-a\n", "line 1: the token is empty"},
		{"space in the token", "CANARY 7f3a9c,alice,team-a\n", "line 1: the token holds a character other than visible ASCII"},
		{"non-ASCII token", canary + "é,alice,team-a\n", "line 1: the token holds a character other than visible ASCII"},
		{"empty principal", canary + ", ,team-a\n", "line 1: the principal is empty"},
		{"control character in the principal", canary + ",al\tice,team-a\n", "line 1: the principal is not valid UTF-8 or holds a control character"},
		{"invalid UTF-8 principal", canary + ",al\xffice,team-a\n", "line 1: the principal is not valid UTF-8"},
		{"no namespaces", canary + ",alice,\n", "line 1: namespace 1 is empty"},
		{"empty namespace", canary + ",alice,team-a;;team-b\n", "line 1: namespace 2 is empty"},
		{"upper-case namespace", canary + ",alice,Team-a\n", "line 1: namespace 1 is neither * nor a DNS-1123 label"},
		{"namespace ending in a dash", canary + ",alice,team-\n", "line 1: namespace 1 is neither"},
		{"namespace too long", canary + ",alice," + strings.Repeat("a", 64) + "\n", "line 1: namespace 1 is neither"},
		{"token in the namespace column", "alice,team-a," + canary + "\n", "line 1: namespace 1 is neither"},
		{"token in the principal column, twice", "tok1," + canary + ",a\ntok2," + canary + ",b\n", "line 2: the principal is also on line 1, with other namespaces or grants"},
		{"duplicate token", canary + ",alice,a\nother,bob,b\n" + canary + ",carol,c\n", "line 3: duplicate token (first on line 1)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, tt.file)
			_, err := auth.Static(t.Context(), path, logr.Discard())
			if err == nil {
				t.Fatal("Static accepted the file")
			}
			msg := err.Error()
			if prefix := "tokens file " + path + ": "; !strings.HasPrefix(msg, prefix+tt.want) {
				t.Errorf("error %q, want prefix %q", msg, prefix+tt.want)
			}
			if strings.Contains(msg, canary) || strings.Contains(msg, "7f3a9c") {
				t.Errorf("error %q discloses the token", msg)
			}
		})
	}
}

func TestStaticRefusesUnreadableFiles(t *testing.T) {
	dir := t.TempDir()
	if _, err := auth.Static(t.Context(), filepath.Join(dir, "missing"), logr.Discard()); err == nil {
		t.Error("Static accepted a missing file")
	}
	big := writeFile(t, strings.Repeat("#\n", 1<<19+1))
	if _, err := auth.Static(t.Context(), big, logr.Discard()); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("Static with a file over 1 MiB: got %v", err)
	}
}

func TestStaticAuthenticate(t *testing.T) {
	const token = "s3cret-Token_value.1"
	a := newStatic(t, writeFile(t, token+",alice,team-a\n"))
	if p, err := a.Authenticator.Authenticate(bearer(token)); err != nil || p.Name != "alice" {
		t.Fatalf("got %v, %v", p, err)
	}
	req := func(header ...string) *http.Request {
		r, _ := http.NewRequest(http.MethodGet, "/", nil)
		for _, h := range header {
			r.Header.Add("Authorization", h)
		}
		return r
	}
	refused := map[string]*http.Request{
		"no header":          req(),
		"empty header":       req(""),
		"other scheme":       req("Basic " + token),
		"no scheme":          req(token),
		"token in scheme":    req("Bearer" + token),
		"trailing word":      req("Bearer " + token + " x"),
		"two headers":        req("Bearer "+token, "Bearer "+token),
		"prefix":             req("Bearer " + token[:len(token)-1]),
		"extension":          req("Bearer " + token + "2"),
		"last byte changed":  req("Bearer " + token[:len(token)-1] + "2"),
		"first byte changed": req("Bearer S" + token[1:]),
		"other case":         req("Bearer " + strings.ToUpper(token)),
	}
	for name, r := range refused {
		p, err := a.Authenticator.Authenticate(r)
		if !errors.Is(err, auth.ErrUnauthenticated) || p != nil {
			t.Errorf("%s: got %v, %v; want ErrUnauthenticated", name, p, err)
		}
		if err != nil && strings.Contains(err.Error(), token[:8]) {
			t.Errorf("%s: error %q discloses the token", name, err)
		}
	}
	for _, h := range []string{"bearer " + token, "BEARER   " + token, "  Bearer " + token + "  "} {
		if p, err := a.Authenticator.Authenticate(req(h)); err != nil || p.Name != "alice" {
			t.Errorf("header %q: got %v, %v", h, p, err)
		}
	}

	p := &auth.Principal{Name: "alice"}
	for _, c := range []struct {
		p    *auth.Principal
		verb string
		ns   string
	}{
		{nil, auth.VerbCreate, "team-a"},
		{&auth.Principal{Name: "bob"}, auth.VerbCreate, "team-a"},
		{p, "delete", "team-a"},
		{p, auth.VerbCreate, "team-b"},
		{p, auth.VerbCreate, ""},
	} {
		if ok, err := a.Authorizer.Allowed(t.Context(), c.p, c.verb, c.ns); ok || err != nil {
			t.Errorf("%v %s in %q: got %v, %v; want denied", c.p, c.verb, c.ns, ok, err)
		}
	}
}

func TestStaticReloads(t *testing.T) {
	t.Parallel()
	logs := &logSink{}
	path := writeFile(t, "tok-a,alice,team-a\n"+canary+",bob,*\n")
	a, err := auth.Static(t.Context(), path, logs.logger())
	if err != nil {
		t.Fatal(err)
	}
	principal := func(token string) string {
		p, err := a.Authenticator.Authenticate(bearer(token))
		if err != nil {
			return ""
		}
		return p.Name
	}
	allowed := func(name, ns string) bool {
		ok, err := a.Authorizer.Allowed(t.Context(), &auth.Principal{Name: name}, auth.VerbCreate, ns)
		return ok && err == nil
	}

	t.Run("token added", func(t *testing.T) {
		rewrite(t, path, "tok-a,alice,team-a\n"+canary+",bob,*\ntok-c,carol,team-c\n")
		withinReloadBound(t, func() bool { return principal("tok-c") == "carol" })
		if !allowed("carol", "team-c") || principal("tok-a") != "alice" {
			t.Error("the reload lost an entry")
		}
	})
	t.Run("namespaces changed", func(t *testing.T) {
		rewrite(t, path, "tok-a,alice,team-b\n"+canary+",bob,*\ntok-c,carol,team-c\n")
		withinReloadBound(t, func() bool { return allowed("alice", "team-b") && !allowed("alice", "team-a") })
	})
	t.Run("token removed", func(t *testing.T) {
		rewrite(t, path, "tok-a,alice,team-b\ntok-c,carol,team-c\n")
		withinReloadBound(t, func() bool { return principal(canary) == "" })
		if allowed("bob", "team-a") {
			t.Error("a principal no longer in the file is still allowed")
		}
	})
	t.Run("file replaced by rename", func(t *testing.T) {
		tmp := path + ".new"
		if err := os.WriteFile(tmp, []byte("tok-d,dave,team-d\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
		withinReloadBound(t, func() bool { return principal("tok-d") == "dave" && principal("tok-a") == "" })
	})
	t.Run("invalid file keeps the previous tokens", func(t *testing.T) {
		rewrite(t, path, "tok-d,dave,team-d\n"+canary+",bob,NOT-A-NAMESPACE\n")
		withinReloadBound(t, func() bool { return logs.contains("Invalid tokens file") })
		if principal("tok-d") != "dave" || principal(canary) != "" {
			t.Error("an invalid file changed the tokens in force")
		}
		if !logs.contains("line 2: namespace 1") {
			t.Errorf("the log does not say which line is wrong:\n%s", logs.String())
		}
	})
	t.Run("missing file keeps the previous tokens", func(t *testing.T) {
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		withinReloadBound(t, func() bool { return logs.contains("Cannot read the tokens file") })
		if principal("tok-d") != "dave" {
			t.Error("a missing file changed the tokens in force")
		}
		rewrite(t, path, "tok-e,erin,team-e\n")
		withinReloadBound(t, func() bool { return principal("tok-e") == "erin" && principal("tok-d") == "" })
	})
	if out := logs.String(); strings.Contains(out, canary) || strings.Contains(out, "7f3a9c") {
		t.Errorf("the log discloses a token:\n%s", out)
	}
}

func TestStaticStopsWithContext(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "tok-a,alice,team-a\n")
	ctx, cancel := context.WithCancel(t.Context())
	a, err := auth.Static(ctx, path, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	time.Sleep(50 * time.Millisecond) // let the watcher see the cancellation
	rewrite(t, path, "tok-b,bob,team-b\n")
	time.Sleep(3 * 500 * time.Millisecond)
	if p, err := a.Authenticator.Authenticate(bearer("tok-a")); err != nil || p.Name != "alice" {
		t.Errorf("after ctx ended the file was still reloaded: %v, %v", p, err)
	}
}

// TestStaticConcurrent runs requests while the file changes, for the race detector.
func TestStaticConcurrent(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "tok-a,alice,team-a\n")
	a := newStatic(t, path)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if p, err := a.Authenticator.Authenticate(bearer("tok-a")); err == nil {
					_, _ = a.Authorizer.Allowed(t.Context(), p, auth.VerbGet, "team-a")
				}
			}
		})
	}
	for i := range 3 {
		rewrite(t, path, fmt.Sprintf("tok-a,alice,team-%d\n", i))
		time.Sleep(600 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
}

func TestNone(t *testing.T) {
	a := auth.None()
	for _, r := range []*http.Request{bearer("anything"), bearer("")} {
		p, err := a.Authenticator.Authenticate(r)
		if err != nil || p.Name != auth.Anonymous {
			t.Fatalf("got %v, %v", p, err)
		}
		for _, ns := range []string{"", "team-a"} {
			if ok, err := a.Authorizer.Allowed(t.Context(), p, auth.VerbUpdate, ns); !ok || err != nil {
				t.Errorf("Allowed in %q: %v, %v", ns, ok, err)
			}
		}
	}
}

func newStatic(t *testing.T, path string) auth.Auth {
	t.Helper()
	a, err := auth.Static(t.Context(), path, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens")
	rewrite(t, path, content)
	return path
}

// rewrite writes the file in place, as an editor or `echo >` would.
func rewrite(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// bearer returns a request with "Authorization: Bearer <token>".
func bearer(token string) *http.Request {
	r, _ := http.NewRequest(http.MethodGet, "/v1/executions", nil)
	r.Header.Set("Authorization", "Bearer "+token)
	return r
}

// withinReloadBound fails t unless cond holds within reloadBound.
func withinReloadBound(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(reloadBound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v", reloadBound)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// logSink collects log lines.
type logSink struct {
	mu    sync.Mutex
	lines []string
}

func (s *logSink) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.lines = append(s.lines, prefix+" "+args)
	}, funcr.Options{Verbosity: 10})
}

func (s *logSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.lines, "\n")
}

func (s *logSink) contains(sub string) bool { return strings.Contains(s.String(), sub) }
