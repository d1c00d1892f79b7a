package httpapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/go-logr/logr"

	"github.com/switchboard-dev/switchboard/runtime/auth"
	"github.com/switchboard-dev/switchboard/runtime/compat"
	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// Compatible front doors (spec/compat.md). The server serves each door's routes behind
// the same authentication, observation and limits as its own, answers their errors in
// the door's shape, and is their compat.Kit: submission through the engine's one
// function, event following from the store, access-checked reads, and the model names
// of the routing table the caller may use.

// errModelsUnavailable answers a model listing on a server configured without a
// routing table (a test server without front doors).
var errModelsUnavailable = protocol.NewError(protocol.CodeInternal, "internal error")

// doorRoutes registers the routes of the configured front doors, and for each of
// their paths a catch-all that answers other methods with 405 in the door's shape.
func (s *server) doorRoutes(doors []compat.Door) {
	type path struct {
		methods []string
		route   compat.Route
	}
	var paths []string
	byPath := map[string]*path{}
	for _, d := range doors {
		for _, rt := range d.Routes(kit{s}) {
			method, p, ok := strings.Cut(rt.Pattern, " ")
			if !ok {
				panic("httpapi: front-door pattern without a method: " + rt.Pattern)
			}
			s.route(rt.Pattern, s.doorHandler(rt, rt.Handle))
			if byPath[p] == nil {
				byPath[p] = &path{route: rt}
				paths = append(paths, p)
			}
			byPath[p].methods = append(byPath[p].methods, method)
		}
	}
	for _, p := range paths {
		allow := byPath[p].methods
		if slices.Contains(allow, http.MethodGet) {
			allow = append(allow, http.MethodHead)
		}
		s.route(p, s.doorHandler(byPath[p].route, s.methodNotAllowed(strings.Join(allow, ", "))))
	}
}

// doorHandler serves h, an endpoint of the front door route rt, authenticated, with its
// errors written in the door's shape.
func (s *server) doorHandler(rt compat.Route, h handlerFunc) handlerFunc {
	authed := s.authenticated(h, false)
	serve := func(w http.ResponseWriter, r *http.Request) {
		if err := authed(w, r); err != nil {
			status, pe := s.classify(r, err)
			if pe.RetryAfterMs > 0 {
				w.Header().Set("Retry-After", strconv.FormatInt((pe.RetryAfterMs+999)/1000, 10))
			}
			rt.WriteError(w, status, pe)
		}
	}
	return func(w http.ResponseWriter, r *http.Request) error {
		if rt.APIKeyHeader != "" && r.Header.Get("Authorization") == "" {
			if key := r.Header.Get(rt.APIKeyHeader); key != "" {
				r = r.Clone(r.Context())
				r.Header.Set("Authorization", "Bearer "+key)
			}
		}
		serve(w, r)
		return nil
	}
}

// kit is the server as a front door's compat.Kit.
type kit struct{ s *server }

func (k kit) Logger() logr.Logger { return k.s.log }

func (k kit) NewStream(w http.ResponseWriter) *compat.Stream {
	return compat.NewStream(w, k.s.writeTimeout)
}

func (k kit) Classify(r *http.Request, err error) (int, *protocol.Error) {
	return k.s.classify(r, err)
}

func (k kit) ReadBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if !isJSON(r.Header) {
		return nil, errNotJSON
	}
	return k.s.readBody(w, r)
}

func (k kit) Submit(w http.ResponseWriter, r *http.Request, native, body []byte) (compat.Submission, error) {
	s := k.s
	req, err := protocol.DecodeRequest(native)
	if err != nil {
		return compat.Submission{}, err
	}
	p := principal(r.Context())
	idem, err := s.idempotency(r.Header, p, body)
	if err != nil {
		return compat.Submission{}, err
	}
	if idem.Key != "" {
		// A key names one call of one endpoint: the same body sent to another front
		// door (or natively) is another request.
		sum := sha256.Sum256([]byte(r.Pattern + "\n" + idem.Fingerprint))
		idem.Fingerprint = hex.EncodeToString(sum[:])
	}
	acc, replayed, err := s.engine.Submit(r.Context(), engine.Principal{Name: p.Name, UID: p.UID, Groups: p.Groups, Visible: s.visibility(r.Context(), p)}, req, idem)
	if err != nil {
		return compat.Submission{}, err
	}
	if replayed {
		s.obs.IdempotencyReplay()
	}
	note(w).execution = acc.ID
	return compat.Submission{Accepted: acc, Replayed: replayed, Keyed: idem.Key != ""}, nil
}

func (k kit) Follow(ctx context.Context, id string, after uint64, fn func([]protocol.Event) error, idle func() error) error {
	s := k.s
	timer := newIdleTimer(ctx, s.keepAlive)
	defer timer.stop()
	woken := false
	for {
		var events []protocol.Event
		if woken && s.announcer != nil {
			events = s.announcer.Announced(id, after, replayBatch)
		}
		if events == nil {
			var err error
			if events, err = s.store.Read(ctx, id, after, replayBatch); err != nil {
				return err
			}
		}
		woken = false
		if len(events) > 0 {
			if err := fn(events); err != nil {
				return err
			}
			last := &events[len(events)-1]
			if last.Type.Terminal() {
				return nil
			}
			after = last.Sequence
			if len(events) == replayBatch {
				continue
			}
		}
		for {
			err := s.store.Wait(timer.ctx, id, after)
			if err == nil {
				timer.reset()
				woken = true
				break
			}
			if ctx.Err() != nil || !timer.fired() {
				return err
			}
			if idle != nil {
				if err := idle(); err != nil {
					return err
				}
			}
			timer.renew()
		}
	}
}

func (k kit) Status(ctx context.Context, id string) (eventstore.Status, error) {
	return k.s.accessible(ctx, id, auth.VerbGet)
}

func (k kit) Snapshot(ctx context.Context, id string) (protocol.Snapshot, error) {
	if _, err := k.s.accessible(ctx, id, auth.VerbGet); err != nil {
		return protocol.Snapshot{}, err
	}
	return k.s.store.Snapshot(ctx, id)
}

func (k kit) Cancel(ctx context.Context, id string) (engine.Cancellation, error) {
	ctx = context.WithoutCancel(ctx)
	if _, err := k.s.accessible(ctx, id, auth.VerbUpdate); err != nil {
		return engine.Cancellation{}, err
	}
	return k.s.engine.Cancel(ctx, id)
}

func (k kit) Remove(ctx context.Context, id string) error {
	if _, err := k.s.accessible(ctx, id, auth.VerbUpdate); err != nil {
		return err
	}
	return k.s.engine.Remove(ctx, id)
}

func (k kit) Models(ctx context.Context) ([]compat.Model, error) {
	s := k.s
	if s.table == nil {
		return nil, errModelsUnavailable
	}
	t := s.table.Load()
	visible := func(string) bool { return true }
	if s.auth != nil {
		namespaces := t.Namespaces()
		allowed, err := s.allowedIn(ctx, principal(ctx), namespaces, false)
		if err != nil {
			return nil, err
		}
		visible = func(ns string) bool {
			i, found := slices.BinarySearch(namespaces, ns)
			return found && allowed[i]
		}
	}
	var models []compat.Model
	abilities := map[string]bool{}
	for _, d := range t.Deployments() {
		if len(d.Abilities) == 0 || !visible(d.Ref.Namespace) {
			continue
		}
		models = append(models, deploymentModel(d))
		for _, a := range d.Abilities {
			if !abilities[a] {
				abilities[a] = true
				models = append(models, compat.Model{ID: a, Ability: a})
			}
		}
	}
	slices.SortFunc(models, func(a, b compat.Model) int { return strings.Compare(a.ID, b.ID) })
	return models, nil
}

func (k kit) Model(ctx context.Context, id string) (compat.Model, bool, error) {
	s := k.s
	if s.table == nil {
		return compat.Model{}, false, errModelsUnavailable
	}
	t := s.table.Load()
	var namespaces []string
	var model compat.Model
	if ref, ok := routing.ParseRef(id); ok {
		if d, found := t.Get(ref); found && len(d.Abilities) > 0 {
			model, namespaces = deploymentModel(d), []string{d.Ref.Namespace}
		}
	} else {
		for _, d := range t.Deployments() {
			if slices.Contains(d.Abilities, id) && !slices.Contains(namespaces, d.Ref.Namespace) {
				namespaces = append(namespaces, d.Ref.Namespace)
			}
		}
		if len(namespaces) > 0 {
			model = compat.Model{ID: id, Ability: id}
		}
	}
	if s.auth == nil {
		return model, len(namespaces) > 0, nil
	}
	p := principal(ctx)
	if len(namespaces) > 0 {
		allowed, err := s.allowedIn(ctx, p, namespaces, true)
		if err != nil {
			return compat.Model{}, false, err
		}
		if slices.Contains(allowed, true) {
			return model, true, nil
		}
	}
	// As on POST /v1/executions, a caller who may use no namespace at all is refused
	// as such (403), whatever the name: the answer then depends on no model the
	// caller cannot see.
	anywhere, err := s.allowedIn(ctx, p, append([]string{""}, t.Namespaces()...), true)
	if err != nil {
		return compat.Model{}, false, err
	}
	if !slices.Contains(anywhere, true) {
		return compat.Model{}, false, errNoNamespace
	}
	return compat.Model{}, false, nil
}

// deploymentModel is the model name of deployment d, pinned to it.
func deploymentModel(d *routing.Deployment) compat.Model {
	ref := d.RefString()
	return compat.Model{
		ID: ref, Ability: d.Abilities[0], Deployment: ref, Namespace: d.Ref.Namespace,
		Provider: d.Provider, ProviderModel: d.Model,
	}
}
