package httpapi

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/auth"
	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// Authentication and per-caller isolation (spec/authentication.md).
//
// Every request is authenticated first: its principal goes into the request context.
// A submission may use the models of the namespaces where RBAC lets its principal
// create executions; routing sees no other deployment. An execution belongs to the
// principal that created it: anyone else gets 404 for it, unless RBAC lets them get
// (read) or update (cancel) executions in its namespace. Event streams and results can
// also be read with the signed stream token of the 202 body's links, which grants
// reading that one execution and nothing else.

// Errors of authentication and authorization. Messages are fixed: they never hold a
// credential.
var (
	errUnauthenticated = &statusError{http.StatusUnauthorized,
		protocol.NewError(protocol.CodeUnauthenticated, "a valid bearer token is required")}
	errNoNamespace = protocol.NewError(protocol.CodePermissionDenied,
		"the caller may not run executions in any namespace")
	errAuthUnavailable = func() *protocol.Error {
		e := protocol.NewError(protocol.CodeProviderUnavailable, "the caller's credentials cannot be verified now; retry later")
		e.RetryAfterMs = 1000
		return e
	}()
)

// grantKey marks a request authorized by a stream token for one execution.
type grantKey struct{}

// authenticated wraps an endpoint with authentication. With streamToken, a valid
// ?token= for the execution in the path authenticates the request as a read of that
// execution only (the endpoint must be a read).
func (s *server) authenticated(h handlerFunc, streamToken bool) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		if s.auth == nil {
			note(w).principal = auth.Anonymous
			r = r.WithContext(auth.WithPrincipal(r.Context(), &auth.Principal{Name: auth.Anonymous}))
			return h(w, r)
		}
		if token := r.URL.Query().Get("token"); streamToken && token != "" && s.tokens != nil {
			id := r.PathValue("id")
			name, err := s.tokens.Verify(token, id, s.now())
			if err != nil {
				return s.unauthenticated(w)
			}
			note(w).principal = name
			ctx := auth.WithPrincipal(r.Context(), &auth.Principal{Name: name})
			return h(w, r.WithContext(context.WithValue(ctx, grantKey{}, id)))
		}
		p, err := s.auth.Authenticator.Authenticate(r)
		switch {
		case err == nil:
			note(w).principal = p.Name
			return h(w, r.WithContext(auth.WithPrincipal(r.Context(), p)))
		case errors.Is(err, auth.ErrUnavailable):
			s.log.Info("Cannot verify a caller's credentials", "reason", "review unavailable")
			return errAuthUnavailable
		default:
			return s.unauthenticated(w)
		}
	}
}

// unauthenticated answers 401 with the challenge RFC 6750 asks for.
func (s *server) unauthenticated(w http.ResponseWriter) error {
	w.Header().Set("WWW-Authenticate", `Bearer realm="switchboard"`)
	return errUnauthenticated
}

// principal is the request's authenticated principal.
func principal(ctx context.Context) *auth.Principal {
	if p := auth.PrincipalFrom(ctx); p != nil {
		return p
	}
	return &auth.Principal{Name: auth.Anonymous}
}

// visibleNamespaces returns the namespaces of the routing table whose models the caller
// may use, as routing's visibility filter: nil when every namespace is visible
// (authentication is off, or RBAC allows the caller everywhere). It answers
// permission_denied when the table has namespaces and the caller may use none.
func (s *server) visibleNamespaces(ctx context.Context, p *auth.Principal) (func(string) bool, error) {
	if s.auth == nil {
		return nil, nil
	}
	az := s.auth.Authorizer
	// A cluster-wide grant (a ClusterRoleBinding) covers every namespace in one review.
	if ok, err := az.Allowed(ctx, p, auth.VerbCreate, ""); err != nil {
		return nil, s.authzFailed(err)
	} else if ok {
		return nil, nil
	}
	namespaces := s.engine.Namespaces()
	allowed := make(map[string]bool, len(namespaces))
	for _, ns := range namespaces {
		ok, err := az.Allowed(ctx, p, auth.VerbCreate, ns)
		if err != nil {
			return nil, s.authzFailed(err)
		}
		if ok {
			allowed[ns] = true
		}
	}
	if len(namespaces) > 0 && len(allowed) == 0 {
		return nil, errNoNamespace
	}
	return func(ns string) bool { return allowed[ns] }, nil
}

// authzFailed logs an authorization that could not be decided and answers it.
func (s *server) authzFailed(err error) error {
	s.log.Error(err, "Cannot authorize a caller")
	return errAuthUnavailable
}

// mayAccess answers errNotFound unless the request's principal may do verb (auth.VerbGet
// to read, auth.VerbUpdate to cancel) to the execution st: it created it, holds a stream
// token for it (reads only), or RBAC allows verb on executions in its namespace.
func (s *server) mayAccess(ctx context.Context, st eventstore.Status, verb string) error {
	if s.auth == nil {
		return nil
	}
	if id, _ := ctx.Value(grantKey{}).(string); id != "" {
		if id == st.ID && verb == auth.VerbGet {
			return nil
		}
		return errNotFound
	}
	p := principal(ctx)
	owner, ns := engine.OwnerOf(st)
	if owner == p.Name {
		return nil
	}
	if ns == "" {
		return errNotFound // never routed: nobody else may see it
	}
	ok, err := s.auth.Authorizer.Allowed(ctx, p, verb, ns)
	if err != nil {
		return s.authzFailed(err)
	}
	if !ok {
		return errNotFound
	}
	return nil
}

// streamToken returns the signed read token for the links of a new execution, or "".
func (s *server) streamToken(id string, p *auth.Principal, now time.Time) string {
	if s.tokens == nil {
		return ""
	}
	return s.tokens.Sign(id, p.Name, now)
}
