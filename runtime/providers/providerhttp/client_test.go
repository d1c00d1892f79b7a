package providerhttp

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
)

func TestClientRefusesRedirects(t *testing.T) {
	var followed atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { followed.Add(1) }))
	defer target.Close()
	redirect := httptest.NewServer(http.RedirectHandler(target.URL, http.StatusTemporaryRedirect))
	defer redirect.Close()

	// The test servers listen on loopback, which only a fence allowing it reaches.
	loopback := NewClient(Fence{AllowLoopback: true})
	for name, c := range map[string]*http.Client{"fenced": Client(loopback), "caller's": Client(redirect.Client())} {
		resp, err := c.Get(redirect.URL)
		if err != nil {
			t.Fatalf("%s client: %v", name, err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusTemporaryRedirect {
			t.Errorf("%s client: status %d, want the 307 itself", name, resp.StatusCode)
		}
	}
	if n := followed.Load(); n != 0 {
		t.Errorf("the redirect target was reached %d times", n)
	}
	if shared := Client(nil); shared != sharedClient() {
		t.Error("the shared client is not shared")
	}
}

func TestLoggerPrefersTheAttempts(t *testing.T) {
	var got []string
	logger := func(name string) logr.Logger {
		return funcr.New(func(_, _ string) { got = append(got, name) }, funcr.Options{})
	}
	Logger(logr.NewContext(context.Background(), logger("attempt")), logger("fallback")).Info("x")
	Logger(context.Background(), logger("fallback")).Info("x")
	Logger(context.Background(), logr.Logger{}).Info("x") // discards, does not panic
	if len(got) != 2 || got[0] != "attempt" || got[1] != "fallback" {
		t.Errorf("logged to %v, want [attempt fallback]", got)
	}
}

func TestBaseURL(t *testing.T) {
	for in, want := range map[string]string{
		"":                                  "https://default.example/v1",
		"https://h.example/":                "https://h.example",
		"http://h.example:8080/a/b/#frag":   "http://h.example:8080/a/b",
		"https://h.example/p?api-version=1": "https://h.example/p?api-version=1",
		"https://user:pw@h.example":         "",
		"ftp://h.example":                   "",
		"/relative":                         "",
	} {
		u, ok := BaseURL(in, "https://default.example/v1")
		if got := ""; ok {
			got = u.String()
			if got != want {
				t.Errorf("BaseURL(%q) = %q, want %q", in, got, want)
			}
		} else if want != "" {
			t.Errorf("BaseURL(%q) refused, want %q", in, want)
		}
	}
	if !HeaderSafe("sk-abc 123") || HeaderSafe("sk-abc\n") || HeaderSafe("ключ") {
		t.Error("HeaderSafe misjudges")
	}
}
