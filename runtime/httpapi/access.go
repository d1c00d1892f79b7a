package httpapi

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/switchboard-dev/switchboard/runtime/auth"
	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// Authentication and per-caller isolation (spec/authentication.md).
//
// Every request is authenticated first: its principal goes into the request context.
// A submission may use the models of the namespaces where RBAC lets its principal
// create executions; routing sees no other deployment, and asks only about the
// namespaces of those that could serve the request (visibility). An execution belongs
// to the principal that created it: anyone else gets 404 for it, unless RBAC lets them
// get (read) or update (cancel) executions in its namespace. Event streams and results can
// also be read with the signed stream token of the 202 body's links, which grants
// reading that one execution and nothing else; it names no principal, and is checked
// against the execution's owner.

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
	errAuthThrottled = func() *protocol.Error {
		e := protocol.NewError(protocol.CodeRateLimited, "too many failed authentications from this address; retry later")
		e.RetryAfterMs = 1000
		return e
	}()
)

// grantKey marks a request authorized by a stream token for one execution; its value is
// a *streamGrant.
type grantKey struct{}

// streamGrant is a request's stream token, verified: the execution it grants reading and
// that execution's status, read to learn its owner, which the token's MAC covers.
// accessible answers with this status rather than reading it again, so that the request
// costs one store read, as with a bearer token.
type streamGrant struct {
	id, owner string
	status    eventstore.Status
}

// authenticated wraps an endpoint with authentication. With streamToken, a valid
// ?token= for the execution in the path authenticates the request as a read of that
// execution only (the endpoint must be a read, and read the status with accessible).
func (s *server) authenticated(h handlerFunc, streamToken bool) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		if s.auth == nil {
			note(w).principal = auth.Anonymous
			r = r.WithContext(auth.WithPrincipal(r.Context(), &auth.Principal{Name: auth.Anonymous}))
			return h(w, r)
		}
		if token := r.URL.Query().Get("token"); streamToken && token != "" && s.tokens != nil {
			g, err := s.verifyStreamToken(r, token)
			if err != nil {
				return err
			}
			if g == nil {
				return s.unauthenticated(w)
			}
			note(w).principal = g.owner
			ctx := auth.WithPrincipal(r.Context(), &auth.Principal{Name: g.owner})
			return h(w, r.WithContext(context.WithValue(ctx, grantKey{}, g)))
		}
		p, err := s.auth.Authenticator.Authenticate(r)
		switch {
		case err == nil:
			note(w).principal = p.Name
			return h(w, r.WithContext(auth.WithPrincipal(r.Context(), p)))
		case errors.Is(err, auth.ErrUnavailable):
			s.log.Info("Cannot verify a caller's credentials", "reason", "review unavailable")
			return errAuthUnavailable
		case errors.Is(err, auth.ErrThrottled):
			return errAuthThrottled
		default:
			return s.unauthenticated(w)
		}
	}
}

// verifyStreamToken returns the grant of a request's stream token, or nil when the token
// is not valid for the execution of the path: malformed, expired, under a key no longer
// in force, signed for another execution or owner, or for one that does not exist (so
// that a link tells nothing about which executions exist). The status is read only for
// a well-formed token. An error is the store's.
//
// The token is checked here, near the top of the stack, rather than where the endpoint
// checks access: HMAC-SHA256 takes stack, and an idle event stream keeps the stack it
// grew (see openStream). It is a function of its own, never inlined, so that none of it
// stays in the frame of authenticated while a stream runs (TestIdleStreamStack).
//
//go:noinline
func (s *server) verifyStreamToken(r *http.Request, token string) (*streamGrant, error) {
	t, err := s.tokens.Parse(token, s.now())
	if err != nil {
		return nil, nil
	}
	id := r.PathValue("id")
	st, err := s.store.Get(r.Context(), id)
	if errors.Is(err, eventstore.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	owner := engine.OwnerOf(st).Principal
	if err := t.Verify(r.Context(), id, owner); err != nil {
		if errors.Is(err, auth.ErrUnauthenticated) {
			return nil, nil
		}
		return nil, err
	}
	return &streamGrant{id: id, owner: owner, status: st}, nil
}

// grantedStatus returns the status a stream token was verified with, when ctx carries
// one for execution id.
func grantedStatus(ctx context.Context, id string) (eventstore.Status, bool) {
	if g, _ := ctx.Value(grantKey{}).(*streamGrant); g != nil && g.id == id {
		return g.status, true
	}
	return eventstore.Status{}, false
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

// reviewFanOut bounds the access reviews one submission has in flight at once.
const reviewFanOut = 8

// visibility is routing's visibility for the caller p (routing.Visibility): it asks
// whether p may create executions in the namespaces of the deployments that serve the
// request's ability, concurrently, and in no other namespace — unless it may use none
// of them: then whether it may use any namespace at all decides between 403
// permission_denied and routing's 422, which must not depend on models the caller
// cannot see. nil when authentication is off. Decisions are cached by the authorizer.
func (s *server) visibility(ctx context.Context, p *auth.Principal) routing.Visibility {
	if s.auth == nil {
		return nil
	}
	return func(candidates, all []string) (func(string) bool, error) {
		allowed, err := s.allowedIn(ctx, p, candidates, false)
		if err != nil {
			return nil, err
		}
		visible := make([]string, 0, len(candidates))
		for i, ns := range candidates {
			if allowed[i] {
				visible = append(visible, ns)
			}
		}
		if len(visible) == 0 && len(all) > 0 {
			// "" asks about every namespace at once (a ClusterRoleBinding); the
			// candidates were just refused.
			others := []string{""}
			for _, ns := range all {
				if !slices.Contains(candidates, ns) {
					others = append(others, ns)
				}
			}
			anywhere, err := s.allowedIn(ctx, p, others, true)
			if err != nil {
				return nil, err
			}
			if !slices.Contains(anywhere, true) {
				return nil, errNoNamespace
			}
		}
		return func(ns string) bool { return slices.Contains(visible, ns) }, nil
	}
}

// allowedIn asks whether p may create executions in each of namespaces, at most
// reviewFanOut at once, and returns the answers in their order. With anyOne it asks no
// further once one namespace is allowed. It answers errAuthUnavailable when a decision
// could not be made.
func (s *server) allowedIn(ctx context.Context, p *auth.Principal, namespaces []string, anyOne bool) ([]bool, error) {
	allowed := make([]bool, len(namespaces))
	if len(namespaces) == 1 { // the usual case, without a goroutine
		ok, err := s.auth.Authorizer.Allowed(ctx, p, auth.VerbCreate, namespaces[0])
		if err != nil {
			return nil, s.authzFailed(err)
		}
		allowed[0] = ok
		return allowed, nil
	}
	var (
		g     errgroup.Group
		found atomic.Bool
	)
	g.SetLimit(reviewFanOut)
	for i, ns := range namespaces {
		if anyOne && found.Load() {
			break
		}
		g.Go(func() error {
			ok, err := s.auth.Authorizer.Allowed(ctx, p, auth.VerbCreate, ns)
			if err != nil {
				return err
			}
			allowed[i] = ok
			if ok {
				found.Store(true)
			}
			return nil
		})
	}
	// With anyOne, an allowed namespace answers whatever the others' reviews did.
	if err := g.Wait(); err != nil && (!anyOne || !found.Load()) {
		return nil, s.authzFailed(err)
	}
	return allowed, nil
}

// authzFailed logs an authorization that could not be decided and answers it.
func (s *server) authzFailed(err error) error {
	s.log.Error(err, "Cannot authorize a caller")
	return errAuthUnavailable
}

// mayAccess answers errNotFound unless the request's principal may do verb (auth.VerbGet
// to read, auth.VerbUpdate to cancel) to the execution st: it created it (the same name
// and, when one was recorded, the same uid: engine.Owner.OwnedBy), holds a stream token
// for it (reads only), or RBAC allows verb on executions in its namespace.
func (s *server) mayAccess(ctx context.Context, st eventstore.Status, verb string) error {
	if s.auth == nil {
		return nil
	}
	if g, _ := ctx.Value(grantKey{}).(*streamGrant); g != nil {
		if g.id == st.ID && verb == auth.VerbGet {
			return nil
		}
		return errNotFound
	}
	p := principal(ctx)
	owner := engine.OwnerOf(st)
	if owner.OwnedBy(p.Name, p.UID) {
		return nil
	}
	if owner.Namespace == "" {
		return errNotFound // never routed: nobody else may see it
	}
	ok, err := s.auth.Authorizer.Allowed(ctx, p, verb, owner.Namespace)
	if err != nil {
		return s.authzFailed(err)
	}
	if !ok {
		return errNotFound
	}
	return nil
}

// streamToken returns the signed read token for the links of execution id, which p
// created at createdAt, or "". The token depends only on them and on the key that signs
// for createdAt, so a replay's is the original one as long as that is valid
// (spec/http-api.md, "Idempotency"). It fails only when the key of a rotation period
// cannot be read from the store.
func (s *server) streamToken(ctx context.Context, id string, p *auth.Principal, createdAt time.Time) (string, error) {
	if s.tokens == nil {
		return "", nil
	}
	return s.tokens.Sign(ctx, id, p.Name, createdAt)
}
