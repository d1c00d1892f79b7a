package kubeauth

import (
	"errors"
	"net/http"
	"strings"

	"github.com/go-logr/logr"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	webhookutil "k8s.io/apiserver/pkg/util/webhook"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/switchboard-dev/switchboard/runtime/auth"
)

// MetricsFilter is a metricsserver.Options.FilterProvider for the secure /metrics of
// cluster mode (spec/authentication.md, "Metrics"): a scraper presents a bearer token
// for the API server's own audience (its ServiceAccount token, as Prometheus sends
// it), and RBAC must allow it get on the non-resource URL it requests.
//
// It does what controller-runtime's filters.WithAuthenticationAndAuthorization does, with
// the same delegating authenticator and authorizer, but answers a refused token 401
// (with a Bearer challenge) instead of 500, and a review it cannot make 503.
func MetricsFilter(config *rest.Config, httpClient *http.Client) (metricsserver.Filter, error) {
	client, err := kubernetes.NewForConfigAndClient(config, httpClient)
	if err != nil {
		return nil, err
	}
	backoff := webhookutil.DefaultRetryBackoffWithInitialDelay(retryInitialDelay)
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		TokenAccessReviewClient:  client.AuthenticationV1(),
		TokenAccessReviewTimeout: reviewTimeout,
		WebhookRetryBackoff:      &backoff,
		CacheTTL:                 DefaultAuthnCacheTTL,
	}.New()
	if err != nil {
		return nil, err
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: client.AuthorizationV1(),
		AllowCacheTTL:             DefaultAllowCacheTTL,
		DenyCacheTTL:              DefaultDenyCacheTTL,
		WebhookRetryBackoff:       &backoff,
	}.New()
	if err != nil {
		return nil, err
	}
	// No audiences: the review checks the token against the API server's own.
	callers := &authenticator{authn: authn}
	return func(log logr.Logger, next http.Handler) (http.Handler, error) {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p, err := callers.Authenticate(r)
			switch {
			case errors.Is(err, auth.ErrUnavailable):
				log.Error(err, "Cannot verify a metrics scraper's token")
				http.Error(w, "credentials cannot be verified now", http.StatusServiceUnavailable)
				return
			case err != nil:
				w.Header().Set("WWW-Authenticate", `Bearer realm="switchboard-metrics"`)
				http.Error(w, "a valid bearer token is required", http.StatusUnauthorized)
				return
			}
			decision, _, err := authz.Authorize(r.Context(), authorizer.AttributesRecord{
				User:            &user.DefaultInfo{Name: p.Name, UID: p.UID, Groups: p.Groups, Extra: p.Extra},
				Verb:            strings.ToLower(r.Method),
				Path:            r.URL.Path,
				ResourceRequest: false,
			})
			switch {
			case err != nil:
				log.Error(err, "Cannot authorize a metrics scraper")
				http.Error(w, "access cannot be decided now", http.StatusServiceUnavailable)
			case decision != authorizer.DecisionAllow:
				http.Error(w, "forbidden", http.StatusForbidden)
			default:
				next.ServeHTTP(w, r)
			}
		}), nil
	}, nil
}
