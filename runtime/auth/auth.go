// Package auth identifies the callers of the execution API and decides what they may do
// (spec/authentication.md): who a request comes from (Authenticator), and whether that
// principal may create, read or cancel executions in a namespace (Authorizer).
//
// Three modes, chosen by --auth:
//   - none: every caller is the principal "anonymous", allowed everything;
//   - kubernetes: bearer tokens verified by TokenReview and decisions made by
//     SubjectAccessReview, through the delegating authenticator and authorizer of
//     k8s.io/apiserver (cached, with retry backoff), on the virtual resource
//     executions.ai.switchboard.dev;
//   - static: a tokens file for standalone use, re-read when it changes.
//
// None and Static build the first and last; the kubernetes mode lives in the subpackage
// kubeauth, which keeps the Kubernetes dependency tree out of this package.
//
// The package also signs and verifies the short-lived, read-only stream tokens that let
// a browser's EventSource follow one execution without an Authorization header
// (StreamTokens).
//
// Credentials — bearer tokens, stream tokens — never appear in errors or logs.
package auth

import (
	"context"
	"errors"
	"net/http"
)

// Verbs on executions, as RBAC names them (spec/authentication.md).
const (
	// VerbCreate lets a principal use the models of a namespace.
	VerbCreate = "create"
	// VerbGet lets a principal read the executions of others in a namespace: status,
	// result and events.
	VerbGet = "get"
	// VerbUpdate lets a principal cancel the executions of others in a namespace.
	VerbUpdate = "update"
	// VerbMetrics lets a principal scrape the /metrics of standalone mode, whatever the
	// namespace (the static mode's grant metrics). In cluster mode /metrics is guarded
	// by the API server's RBAC on the non-resource URL instead (spec/authentication.md,
	// "Metrics").
	VerbMetrics = "metrics"
)

// The virtual resource RBAC rules name.
const (
	Group    = "ai.switchboard.dev"
	Resource = "executions"
)

// Anonymous is the principal of every caller with --auth=none.
const Anonymous = "anonymous"

// Principal is an authenticated caller.
type Principal struct {
	// Name is the caller's user name: system:serviceaccount:<ns>:<name> for a
	// ServiceAccount, the tokens file's principal in static mode, Anonymous with none.
	Name string
	// UID is the user's uid, when the authenticator knows one: a ServiceAccount's
	// object uid in kubernetes mode, so that one deleted and created again under the
	// same name is another principal. Empty in the other modes.
	UID string
	// Groups are the user's groups (kubernetes mode).
	Groups []string
	// Extra holds the token's extra attributes (kubernetes mode), which
	// SubjectAccessReview needs to decide as the API server would.
	Extra map[string][]string
}

// Errors of Authenticate; test with errors.Is.
var (
	// ErrUnauthenticated: the request has no credentials, or they are not valid (unknown
	// token, another audience, expired, a deleted ServiceAccount). Answered 401.
	ErrUnauthenticated = errors.New("auth: unauthenticated")
	// ErrUnavailable: the credentials could not be checked (the API server did not
	// answer, or this replica has as many reviews in flight as it allows). Answered 503,
	// retryable.
	ErrUnavailable = errors.New("auth: cannot verify credentials now")
	// ErrThrottled: the request's client address has failed to authenticate too often
	// lately, so its credentials were not checked. Answered 429, retryable.
	ErrThrottled = errors.New("auth: too many failed authentications from this address")
)

// Authenticator identifies the caller of a request.
type Authenticator interface {
	// Authenticate returns the principal of r (from "Authorization: Bearer <token>"),
	// ErrUnauthenticated, ErrUnavailable or ErrThrottled (possibly wrapped). It never
	// returns an error whose text holds the credential.
	Authenticate(r *http.Request) (*Principal, error)
}

// Authorizer decides what a principal may do with the executions of a namespace.
type Authorizer interface {
	// Allowed reports whether p may perform verb (VerbCreate, VerbGet, VerbUpdate) on
	// executions in namespace ns; ns "" asks whether p may do so in every namespace at
	// once (a ClusterRoleBinding, or * in the tokens file). VerbMetrics asks whether p
	// may scrape /metrics. A nil p is allowed nothing.
	// An error means it could not decide (the API server did not answer; it wraps
	// ErrUnavailable); callers refuse then.
	Allowed(ctx context.Context, p *Principal, verb, ns string) (bool, error)
}

// Auth is the pair a mode provides.
type Auth struct {
	Authenticator Authenticator
	Authorizer    Authorizer
}

type principalKey struct{}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom returns the principal ctx carries, or nil.
func PrincipalFrom(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey{}).(*Principal)
	return p
}
