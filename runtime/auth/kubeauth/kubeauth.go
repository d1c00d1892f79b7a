// Package kubeauth is the mode --auth=kubernetes of the execution API
// (spec/authentication.md): callers present a Kubernetes bearer token — typically a
// projected ServiceAccount token minted for the audience "switchboard" — which the API
// server verifies with a TokenReview, and RBAC decides, through SubjectAccessReviews, what
// they may do with executions.ai.switchboard.dev in each namespace.
//
// Both reviews go through the delegating authenticator and authorizer of k8s.io/apiserver,
// as aggregated API servers and controller-runtime's metrics filter use them: answers are
// cached for a few seconds and failed reviews retried with backoff. The runtime's own
// identity needs `create` on tokenreviews.authentication.k8s.io and
// subjectaccessreviews.authorization.k8s.io (the ClusterRole system:auth-delegator).
//
// A flood of bad tokens must not cost a review each, nor make callers wait behind one
// (spec/authentication.md, "Floods of bad tokens"). So Authenticate refuses at once a
// token that is not a JWT for one of the audiences, or has expired (plausible), and a
// client address that failed too often lately (429); the reviews themselves go through
// a client (NewClient) that bounds them in flight and refuses at once what it cannot
// make now (503).
//
// The package is kept apart from runtime/auth because it pulls in the Kubernetes client
// and apiserver trees, which the light modes and their race-detector tests do without.
package kubeauth

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	apiserverauthenticator "k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	webhookutil "k8s.io/apiserver/pkg/util/webhook"
	"k8s.io/client-go/kubernetes"

	"github.com/switchboard-dev/switchboard/runtime/auth"
)

// Defaults of Config, those of k8s.io/apiserver's delegating authentication and
// authorization options (pkg/server/options), which aggregated API servers run with.
const (
	// DefaultAudience is the audience tokens must be minted for (--auth-audiences).
	DefaultAudience = "switchboard"
	// DefaultAuthnCacheTTL is how long a TokenReview's answer, positive or negative, is
	// reused for the same token. A token accepted before its ServiceAccount was deleted
	// stays accepted for up to this long, plus the time the API server itself caches
	// successful token authentications (10 s in kube-apiserver).
	DefaultAuthnCacheTTL = 10 * time.Second
	// DefaultAllowCacheTTL is how long a SubjectAccessReview's "allowed" is reused: a
	// removed RoleBinding keeps working at most this long.
	DefaultAllowCacheTTL = 10 * time.Second
	// DefaultDenyCacheTTL is how long a SubjectAccessReview's "denied" is reused: a new
	// RoleBinding takes effect within this long.
	DefaultDenyCacheTTL = 10 * time.Second
)

// reviewTimeout bounds one TokenReview or SubjectAccessReview request, as the delegating
// options' TokenRequestTimeout and ClientTimeout do.
const reviewTimeout = 10 * time.Second

// retryInitialDelay is the first pause before retrying a review that failed transiently
// (connection reset, 429, 5xx, timeout); the pause grows 1.5 times per retry, five tries
// in all. These are the values of options.DefaultAuthWebhookRetryBackoff, through a
// package that does not pull in the whole generic API server.
const retryInitialDelay = 500 * time.Millisecond

// Config configures New.
type Config struct {
	// Client reaches the API server as the runtime, which must be allowed to create
	// tokenreviews and subjectaccessreviews. NewClient makes one that bounds the reviews
	// in flight and never waits long for its rate limit.
	Client kubernetes.Interface
	// Audiences are those a token must have been minted for, at least one of them
	// (TokenReview spec.audiences). Default: DefaultAudience.
	Audiences []string
	// AuthnCacheTTL is how long a token's review is reused. Zero means
	// DefaultAuthnCacheTTL; a negative value disables the cache.
	AuthnCacheTTL time.Duration
	// AllowCacheTTL is how long an allowed SubjectAccessReview is reused. Zero means
	// DefaultAllowCacheTTL; a negative value disables the cache.
	AllowCacheTTL time.Duration
	// DenyCacheTTL is how long a denied SubjectAccessReview is reused. Zero means
	// DefaultDenyCacheTTL; a negative value disables the cache.
	DenyCacheTTL time.Duration
	// FailureBurst is how many authentications one client address may fail in a row;
	// past them it may fail one more a second, and meanwhile its requests are refused
	// with auth.ErrThrottled without a review. Zero means DefaultFailureBurst; a
	// negative value disables the limit.
	FailureBurst int
}

// New returns the mode --auth=kubernetes. It contacts nothing: the first request does.
// ctx carries the logger (logr.FromContextOrDiscard) New reports its configuration to.
//
// Authenticate reads "Authorization: Bearer <token>" and nothing else — no anonymous
// requests, client certificates, front-proxy headers or WebSocket subprotocol tokens —
// and returns the user the TokenReview names, with its uid, groups and extra attributes.
// A missing token, one that is not a JWT for one of the audiences or has expired (no
// review is made for those), or one the API server does not accept for the audiences,
// is auth.ErrUnauthenticated; a review that could not be made (the API server
// unreachable, the runtime not allowed to create tokenreviews, or the client's bounds
// reached) is auth.ErrUnavailable. A client address (the TCP peer's) that failed
// FailureBurst times in a row gets auth.ErrThrottled until its attempts refill.
//
// Allowed asks whether RBAC lets the principal do verb on executions.ai.switchboard.dev
// in the namespace ("" asks for every namespace, which only a ClusterRoleBinding grants).
// Its errors wrap auth.ErrUnavailable.
func New(ctx context.Context, cfg Config) (auth.Auth, error) {
	if cfg.Client == nil {
		return auth.Auth{}, errors.New("kubeauth: no Kubernetes client")
	}
	audiences := slices.Clone(cfg.Audiences)
	if len(audiences) == 0 {
		audiences = []string{DefaultAudience}
	}
	if slices.Contains(audiences, "") {
		return auth.Auth{}, errors.New("kubeauth: empty audience")
	}
	backoff := webhookutil.DefaultRetryBackoffWithInitialDelay(retryInitialDelay)

	// Neither Anonymous, ClientCertificateCAContentProvider nor RequestHeaderConfig is
	// set: the result authenticates bearer tokens only (and the WebSocket subprotocol
	// form of them, which Authenticate does not pass on).
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		TokenAccessReviewClient:  cfg.Client.AuthenticationV1(),
		TokenAccessReviewTimeout: reviewTimeout,
		WebhookRetryBackoff:      &backoff,
		CacheTTL:                 ttl(cfg.AuthnCacheTTL, DefaultAuthnCacheTTL),
		APIAudiences:             audiences,
	}.New()
	if err != nil {
		return auth.Auth{}, fmt.Errorf("kubeauth: authenticator: %w", err)
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: cfg.Client.AuthorizationV1(),
		AllowCacheTTL:             ttl(cfg.AllowCacheTTL, DefaultAllowCacheTTL),
		DenyCacheTTL:              ttl(cfg.DenyCacheTTL, DefaultDenyCacheTTL),
		WebhookRetryBackoff:       &backoff,
	}.New()
	if err != nil {
		return auth.Auth{}, fmt.Errorf("kubeauth: authorizer: %w", err)
	}
	a := &authenticator{authn: authn, audiences: audiences, now: time.Now}
	burst := cfg.FailureBurst
	if burst == 0 {
		burst = DefaultFailureBurst
	}
	if burst > 0 {
		a.failures = newFailureLimit(burst)
	}
	logr.FromContextOrDiscard(ctx).V(1).Info("Kubernetes authentication configured", "audiences", audiences, "failureBurst", max(burst, 0))
	return auth.Auth{
		Authenticator: a,
		Authorizer:    &rbacAuthorizer{authz: authz},
	}, nil
}

// ttl maps a Config duration to the factories' (where 0 disables the cache).
func ttl(d, def time.Duration) time.Duration {
	switch {
	case d == 0:
		return def
	case d < 0:
		return 0
	default:
		return d
	}
}

var (
	errNoBearerToken = fmt.Errorf("%w: no bearer token", auth.ErrUnauthenticated)
	errTokenRefused  = fmt.Errorf("%w: token not accepted by the Kubernetes API server", auth.ErrUnauthenticated)
	errTokenShape    = fmt.Errorf("%w: token not a JWT for the audiences, or expired", auth.ErrUnauthenticated)
)

type authenticator struct {
	authn apiserverauthenticator.Request
	// audiences are those tokens must be minted for; none (MetricsFilter) leaves the
	// audience, and the shape of tokens, to the API server.
	audiences apiserverauthenticator.Audiences
	// failures throttles the client addresses that fail; nil: no limit.
	failures *failureLimit
	now      func() time.Time
}

func (a *authenticator) Authenticate(r *http.Request) (*auth.Principal, error) {
	if a.failures == nil {
		return a.authenticate(r)
	}
	attempt := a.failures.attempt(r)
	if attempt == nil {
		return nil, auth.ErrThrottled
	}
	p, err := a.authenticate(r)
	// Only failures count: neither an accepted token nor a review that could not be
	// made is the address's fault.
	attempt.done(errors.Is(err, auth.ErrUnauthenticated))
	return p, err
}

// authenticate is Authenticate without the per-address limit.
func (a *authenticator) authenticate(r *http.Request) (*auth.Principal, error) {
	token, ok := auth.BearerToken(r)
	if !ok {
		return nil, errNoBearerToken
	}
	if len(a.audiences) > 0 && !plausible(token, a.audiences, a.now()) {
		return nil, errTokenShape
	}
	// The delegating authenticator is given a request of its own that carries the token
	// alone: it may not look at the caller's TLS state or other headers, and it removes
	// the Authorization header it accepted, which the caller's request keeps. The audience
	// set on the context is what makes the TokenReview check the token's audience, as
	// the generic API server's authentication filter does (without it the review would
	// use the API server's own audiences). Without audiences (MetricsFilter) none is
	// set: an empty set on the context would match no token at all.
	ctx := r.Context()
	if len(a.audiences) > 0 {
		ctx = apiserverauthenticator.WithAudiences(ctx, a.audiences)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "/", http.NoBody)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", auth.ErrUnavailable, err)
	}
	req.Header.Set("Authorization", "Bearer "+token)

	resp, ok, err := a.authn.AuthenticateRequest(req)
	switch {
	case err != nil && unavailable(err):
		// The error comes from the client (API status, transport, context), never
		// from the token's content; the redaction guards against a message that
		// quotes the request anyway.
		return nil, fmt.Errorf("%w: token review: %s", auth.ErrUnavailable, redact(err.Error(), token))
	case err != nil, !ok, resp == nil || resp.User == nil || resp.User.GetName() == "":
		return nil, errTokenRefused
	}
	u := resp.User
	p := &auth.Principal{
		Name:   u.GetName(),
		UID:    u.GetUID(),
		Groups: slices.Clone(u.GetGroups()),
	}
	if extra := u.GetExtra(); len(extra) > 0 {
		p.Extra = make(map[string][]string, len(extra))
		for k, v := range extra {
			p.Extra[k] = slices.Clone(v)
		}
	}
	return p, nil
}

// unavailable reports whether an error of the delegating authenticator says the review
// could not be made, rather than that the token was refused. The authenticator joins the
// errors of its parts; a refusal is a plain error (the review's status.error or "invalid
// bearer token"), while a failed review is an API status (the runtime may not create
// tokenreviews, the API server is overloaded or failing), a transport error, the review
// client's bounds (errReviewsBusy) or the end of the request's context.
func unavailable(err error) bool {
	for _, e := range utilerrors.Flatten(utilerrors.NewAggregate([]error{err})).Errors() {
		var status apierrors.APIStatus
		var netErr net.Error
		var urlErr *url.Error
		if errors.As(e, &status) || errors.As(e, &netErr) || errors.As(e, &urlErr) || errors.Is(e, errReviewsBusy) ||
			errors.Is(e, context.Canceled) || errors.Is(e, context.DeadlineExceeded) {
			return true
		}
	}
	return false
}

// redact removes token from msg.
func redact(msg, token string) string {
	return strings.ReplaceAll(msg, token, "[redacted]")
}

type rbacAuthorizer struct {
	authz authorizer.Authorizer
}

func (a *rbacAuthorizer) Allowed(ctx context.Context, p *auth.Principal, verb, ns string) (bool, error) {
	if p == nil {
		return false, nil
	}
	// The review's client has no timeout of its own (the Client is the caller's); bound
	// it as the delegating options' ClientTimeout does.
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	decision, _, err := a.authz.Authorize(ctx, authorizer.AttributesRecord{
		User: &user.DefaultInfo{
			Name:   p.Name,
			UID:    p.UID,
			Groups: p.Groups,
			Extra:  p.Extra,
		},
		Verb:            verb,
		Namespace:       ns,
		APIGroup:        auth.Group,
		Resource:        auth.Resource,
		ResourceRequest: true,
	})
	if err != nil {
		return false, fmt.Errorf("%w: subject access review: %w", auth.ErrUnavailable, err)
	}
	return decision == authorizer.DecisionAllow, nil
}
