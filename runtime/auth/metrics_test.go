package auth_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-logr/logr"

	"github.com/switchboard-dev/switchboard/runtime/auth"
)

// In static mode /metrics answers the tokens whose line has the grant metrics: no or an
// unknown token is 401 with a Bearer challenge, a token without the grant 403.
func TestMetricsFilter(t *testing.T) {
	a := newStatic(t, writeFile(t, "tok-scraper,prometheus,monitoring,metrics\ntok-ops,ops,*,read,cancel\n"))
	h := auth.MetricsFilter(a, logr.Discard(), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("switchboard_up 1\n"))
	}))
	for _, tc := range []struct {
		name, header string
		status       int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"unknown token", "Bearer tok-nobody", http.StatusUnauthorized},
		{"another scheme", "Basic dG9rLXNjcmFwZXI=", http.StatusUnauthorized},
		{"a token without the grant", "Bearer tok-ops", http.StatusForbidden},
		{"a token with the grant", "Bearer tok-scraper", http.StatusOK},
	} {
		r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		if tc.header != "" {
			r.Header.Set("Authorization", tc.header)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.name, w.Code, w.Body, tc.status)
		}
		if got := w.Header().Get("WWW-Authenticate"); (tc.status == http.StatusUnauthorized) != strings.HasPrefix(got, "Bearer") {
			t.Errorf("%s: WWW-Authenticate %q", tc.name, got)
		}
		if tc.status != http.StatusOK && strings.Contains(w.Body.String(), "switchboard_up") {
			t.Errorf("%s: the metrics were served", tc.name)
		}
	}
}
