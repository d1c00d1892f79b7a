package client

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// authRuntime records the Authorization header of every request and answers each as
// the runtime would for a terminal execution.
type authRuntime struct {
	mu   sync.Mutex
	seen []string
}

func (a *authRuntime) start(t *testing.T, opts ...Option) *Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.seen = append(a.seen, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
		a.mu.Unlock()
		switch {
		case r.URL.Path == "/v1/executions/exe_1/events":
			w.WriteHeader(http.StatusNoContent)
		case r.Method == http.MethodPost && r.URL.Path == "/v1/executions":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusAccepted)
			io.WriteString(w, `{"id":"exe_1","status":"accepted","links":{}}`)
		default:
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"id":"exe_1","status":"completed"}`)
		}
	}))
	t.Cleanup(srv.Close)
	c, err := New(srv.URL, append([]Option{WithHTTPClient(srv.Client())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// requests returns the requests seen since the last call.
func (a *authRuntime) requests() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.seen
	a.seen = nil
	return s
}

// callAll makes one call of each kind and returns the first error.
func callAll(ctx context.Context, c *Client) error {
	if _, err := c.Submit(ctx, &protocol.Request{Ability: "chat", Input: []protocol.Part{{Type: protocol.PartText, Text: "hi"}}}); err != nil {
		return err
	}
	if _, err := c.Get(ctx, "exe_1"); err != nil {
		return err
	}
	if _, err := c.Result(ctx, "exe_1"); err != nil {
		return err
	}
	if _, err := c.Cancel(ctx, "exe_1"); err != nil {
		return err
	}
	st, err := c.Events(ctx, "exe_1", 0)
	if err != nil {
		return err
	}
	return st.Close()
}

func TestBearerTokenSent(t *testing.T) {
	rt := &authRuntime{}
	c := rt.start(t, WithBearerToken("tok.en-1"))
	if err := callAll(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	seen := rt.requests()
	if len(seen) != 5 {
		t.Fatalf("requests %q", seen)
	}
	for _, s := range seen {
		if !strings.HasSuffix(s, " Bearer tok.en-1") {
			t.Errorf("request %q", s)
		}
	}

	// Without a token option nothing is sent.
	plain := &authRuntime{}
	if err := callAll(context.Background(), plain.start(t)); err != nil {
		t.Fatal(err)
	}
	for _, s := range plain.requests() {
		if !strings.HasSuffix(s, " ") {
			t.Errorf("request %q carries an Authorization header", s)
		}
	}
}

func TestBearerTokenInvalid(t *testing.T) {
	const secret = "s3cret"
	for name, tok := range map[string]string{
		"empty":        "",
		"space":        "a " + secret,
		"newline":      secret + "\nX-Injected: 1",
		"non-ASCII":    secret + "é",
		"control char": secret + "\x00",
	} {
		t.Run(name, func(t *testing.T) {
			rt := &authRuntime{}
			err := callAll(context.Background(), rt.start(t, WithBearerToken(tok)))
			if err == nil {
				t.Fatal("no error")
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error holds the token: %v", err)
			}
			if seen := rt.requests(); len(seen) != 0 {
				t.Errorf("sent %q", seen)
			}
		})
	}
}

// projectedToken lays out dir as the kubelet lays out a projected volume: the token is
// dir/token, a link to ..data/token, and ..data is a link to a timestamped directory
// holding the real file. Each call writes a new directory and swaps ..data atomically.
func projectedToken(t *testing.T, dir, tok string) string {
	t.Helper()
	ts, err := os.MkdirTemp(dir, "..ts-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ts, "token"), []byte(tok), 0o600); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "token")
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		if err := os.Symlink(filepath.Join("..data", "token"), path); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

func TestTokenFileRotation(t *testing.T) {
	dir := t.TempDir()
	path := projectedToken(t, dir, "first")
	rt := &authRuntime{}
	c := rt.start(t, WithTokenFile(path))
	ctx := context.Background()
	for range 2 {
		if _, err := c.Get(ctx, "exe_1"); err != nil {
			t.Fatal(err)
		}
	}
	// The kubelet's rotation: a new file behind the link, with a token of the same size.
	projectedToken(t, dir, "secnd")
	if err := callAll(ctx, c); err != nil {
		t.Fatal(err)
	}
	seen := rt.requests()
	for i, s := range seen {
		want := " Bearer first"
		if i >= 2 {
			want = " Bearer secnd"
		}
		if !strings.HasSuffix(s, want) {
			t.Errorf("request %d %q, want the header%s", i, s, want)
		}
	}
}

func TestTokenFileRereadAfterMaxAge(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("aaaa\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ft := &fileToken{path: path, now: func() time.Time { return now }}
	if tok, err := ft.token(); tok != "aaaa" || err != nil {
		t.Fatalf("token %q, %v", tok, err)
	}
	// Rewritten in place with the same size and modification time: only the age of the
	// cached token tells.
	if err := os.WriteFile(path, []byte("bbbb\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	now = now.Add(tokenFileMaxAge - time.Second)
	if tok, err := ft.token(); tok != "aaaa" || err != nil {
		t.Fatalf("within the max age: token %q, %v", tok, err)
	}
	now = now.Add(time.Second)
	if tok, err := ft.token(); tok != "bbbb" || err != nil {
		t.Fatalf("after the max age: token %q, %v", tok, err)
	}
}

func TestTokenFileErrors(t *testing.T) {
	const secret = "s3cret"
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")

	rt := &authRuntime{}
	err := callAll(context.Background(), rt.start(t, WithTokenFile(missing)))
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing file: %v", err)
	}
	if seen := rt.requests(); len(seen) != 0 {
		t.Errorf("sent %q", seen)
	}

	for name, content := range map[string]string{
		"empty":     " \n",
		"two lines": secret + "\n" + secret + "\n",
		"too large": strings.Repeat(secret, maxTokenFileSize),
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			rt := &authRuntime{}
			err := callAll(context.Background(), rt.start(t, WithTokenFile(path)))
			if err == nil || strings.Contains(err.Error(), secret) {
				t.Errorf("error %v", err)
			}
			if seen := rt.requests(); len(seen) != 0 {
				t.Errorf("sent %q", seen)
			}
		})
	}

	// A file that disappears fails the next call, and a valid one brings it back.
	path := filepath.Join(dir, "token")
	if err := os.WriteFile(path, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	rt = &authRuntime{}
	c := rt.start(t, WithTokenFile(path))
	ctx := context.Background()
	if _, err := c.Get(ctx, "exe_1"); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "exe_1"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("removed file: %v", err)
	}
	if err := os.WriteFile(path, []byte("back"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "exe_1"); err != nil {
		t.Fatal(err)
	}
	if seen := rt.requests(); len(seen) != 2 || !strings.HasSuffix(seen[1], " Bearer back") {
		t.Errorf("requests %q", seen)
	}
}

// The token is read under a lock; concurrent calls (and a rotation under them) are
// safe under the race detector.
func TestTokenFileConcurrent(t *testing.T) {
	dir := t.TempDir()
	path := projectedToken(t, dir, "t0")
	rt := &authRuntime{}
	c := rt.start(t, WithTokenFile(path))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 20 {
				if _, err := c.Get(context.Background(), "exe_1"); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	projectedToken(t, dir, "t1")
	wg.Wait()
	seen := rt.requests()
	if len(seen) != 160 {
		t.Fatalf("%d requests", len(seen))
	}
	for _, s := range seen {
		if !strings.HasSuffix(s, " Bearer t0") && !strings.HasSuffix(s, " Bearer t1") {
			t.Errorf("request %q", s)
		}
	}
}
