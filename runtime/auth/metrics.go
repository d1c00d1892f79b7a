package auth

import (
	"errors"
	"net/http"

	"github.com/go-logr/logr"
)

// MetricsFilter guards the /metrics of standalone mode (spec/authentication.md,
// "Metrics"): the scraper presents a bearer token that a authenticates, and a must allow
// its principal VerbMetrics (in static mode, the grant metrics of its line). It answers
// as the filter of cluster mode does (kubeauth.MetricsFilter): no or an unknown token ⇒
// 401 with a Bearer challenge, a token without the grant ⇒ 403, credentials that cannot
// be checked now ⇒ 503.
func MetricsFilter(a Auth, log logr.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := a.Authenticator.Authenticate(r)
		switch {
		case errors.Is(err, ErrUnavailable):
			log.Error(err, "Cannot verify a metrics scraper's token")
			http.Error(w, "credentials cannot be verified now", http.StatusServiceUnavailable)
			return
		case err != nil:
			w.Header().Set("WWW-Authenticate", `Bearer realm="switchboard-metrics"`)
			http.Error(w, "a valid bearer token is required", http.StatusUnauthorized)
			return
		}
		ok, err := a.Authorizer.Allowed(r.Context(), p, VerbMetrics, "")
		switch {
		case err != nil:
			log.Error(err, "Cannot authorize a metrics scraper")
			http.Error(w, "access cannot be decided now", http.StatusServiceUnavailable)
		case !ok:
			http.Error(w, "forbidden", http.StatusForbidden)
		default:
			next.ServeHTTP(w, r)
		}
	})
}
