package main

import (
	"crypto/sha256"
	"encoding/base64"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

// The page's Content-Security-Policy admits its inline script and style by hash, so an
// edit to either must update the hash, or the browser refuses to run it.
func TestPageCSPHashes(t *testing.T) {
	csp := regexp.MustCompile(`http-equiv="Content-Security-Policy" content="([^"]*)"`).FindSubmatch(page)
	if csp == nil {
		t.Fatal("no Content-Security-Policy meta element")
	}
	for _, tag := range []string{"script", "style"} {
		body := regexp.MustCompile(`(?s)<` + tag + `>(.*?)</` + tag + `>`).FindSubmatch(page)
		if body == nil {
			t.Fatalf("no <%s>", tag)
		}
		sum := sha256.Sum256(body[1])
		want := tag + "-src 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
		if !strings.Contains(string(csp[1]), want) {
			t.Errorf("the policy lacks %s (recompute it after editing the <%s>)", want, tag)
		}
	}
	if strings.Contains(string(page), "innerHTML") {
		t.Error("the page uses innerHTML; render event data as text only")
	}
}

func TestHandler(t *testing.T) {
	var got *http.Request
	runtime := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "retry: 2000\n\n")
	}))
	defer runtime.Close()
	h, err := newHandler(runtime.URL+"/prefix", log.New(io.Discard, "", 0))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") || string(body) != string(page) {
		t.Errorf("page: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}

	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/executions/exe_1/events?token=t0k", nil)
	req.Header.Set("Last-Event-ID", "7")
	req.Header.Set("Authorization", "Bearer not-for-the-runtime")
	req.Header.Set("Cookie", "session=1")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "retry: 2000\n\n" {
		t.Fatalf("events: %d %q", resp.StatusCode, body)
	}
	if got.URL.Path != "/prefix/v1/executions/exe_1/events" || got.URL.RawQuery != "token=t0k" ||
		got.Header.Get("Last-Event-ID") != "7" || got.Header.Get("Authorization") != "" || got.Header.Get("Cookie") != "" {
		t.Errorf("proxied %s %q %v", got.URL.Path, got.URL.RawQuery, got.Header)
	}

	for _, c := range []struct{ method, path string }{
		{http.MethodPost, "/v1/executions"},
		{http.MethodGet, "/v1/executions/exe_1"},
		{http.MethodPost, "/v1/executions/exe_1/cancel"},
		{http.MethodDelete, "/v1/executions/exe_1/events"},
	} {
		got = nil
		req, _ := http.NewRequest(c.method, srv.URL+c.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode < 400 || got != nil {
			t.Errorf("%s %s: %d, proxied %v", c.method, c.path, resp.StatusCode, got != nil)
		}
	}

	for _, bad := range []string{"", "localhost:8080", "ftp://x", "http://x/?q=1"} {
		if _, err := newHandler(bad, log.New(io.Discard, "", 0)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
