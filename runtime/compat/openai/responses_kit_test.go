package openai

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/switchboard-dev/switchboard/runtime/compat"
	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// fakeKit is a compat.Kit over executions kept in memory, whose events a script gives:
// the door's handlers run against it as against the server, with the native request
// checked by protocol.DecodeRequest as Kit.Submit checks it.
type fakeKit struct {
	mu     sync.Mutex
	execs  map[string]*fakeExec
	keys   map[string]string // Idempotency-Key → execution
	models map[string]compat.Model
	// script gives the events of a new execution after execution.accepted; with hold,
	// the execution then stays running until it is cancelled.
	script func(req *protocol.Request) (events []any, hold bool)
	// accepted counts the submissions that created an execution; cancelled the
	// executions a cancel ended.
	accepted, cancelled int
	requests            []*protocol.Request
	next                int
}

type fakeExec struct {
	events   []protocol.Event
	metadata map[string]string
	changed  chan struct{}
}

func newFakeKit() *fakeKit {
	return &fakeKit{
		execs: map[string]*fakeExec{}, keys: map[string]string{},
		models: map[string]compat.Model{
			"chat":     {ID: "chat", Ability: "chat"},
			"e2e/echo": {ID: "e2e/echo", Ability: "chat", Deployment: "e2e/echo", Namespace: "e2e"},
		},
		script: func(*protocol.Request) ([]any, bool) {
			return join(routeEv, text(0, "Hello"), usageEv, []any{protocol.EventCompleted, `{"finish_reason":"stop"}`}), false
		},
	}
}

var errNotFoundKit = protocol.NewError(protocol.CodeNotFound, "execution not found")

func (k *fakeKit) ReadBody(_ http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.Header.Get("Content-Type") != "application/json" {
		return nil, protocol.NewError(protocol.CodeInvalidRequest, "Content-Type: the body must be application/json")
	}
	return io.ReadAll(r.Body)
}

func (k *fakeKit) Submit(_ http.ResponseWriter, r *http.Request, native, _ []byte) (compat.Submission, error) {
	req, err := protocol.DecodeRequest(native)
	if err != nil {
		return compat.Submission{}, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	key := r.Header.Get("Idempotency-Key")
	if id, ok := k.keys[key]; ok && key != "" {
		x := k.execs[id]
		return compat.Submission{Accepted: engine.Accepted{ID: id, CreatedAt: x.events[0].Timestamp}, Replayed: true, Keyed: true}, nil
	}
	k.next++
	id := "exe_fake" + strconv.Itoa(k.next)
	k.accepted++
	k.requests = append(k.requests, req)
	pairs, hold := k.script(req)
	evs := execution(pairs...)
	if hold {
		for i, ev := range evs {
			if ev.Type.Terminal() {
				evs = evs[:i]
				break
			}
		}
	}
	for i := range evs {
		evs[i].ExecutionID = id
	}
	k.execs[id] = &fakeExec{events: evs, metadata: req.Metadata, changed: make(chan struct{})}
	if key != "" {
		k.keys[key] = id
	}
	return compat.Submission{Accepted: engine.Accepted{ID: id, CreatedAt: evs[0].Timestamp}, Keyed: key != ""}, nil
}

// appendEvent records ev as the next event of execution id.
func (k *fakeKit) appendEvent(id string, typ protocol.EventType, data string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	x := k.execs[id]
	seq := uint64(len(x.events) + 1)
	x.events = append(x.events, protocol.Event{ExecutionID: id, Sequence: seq,
		Timestamp: testStart.Add(time.Duration(seq) * time.Millisecond), Type: typ, Data: json.RawMessage(data)})
	close(x.changed)
	x.changed = make(chan struct{})
}

func (k *fakeKit) exec(id string) (*fakeExec, []protocol.Event, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	x := k.execs[id]
	if x == nil {
		return nil, nil, errNotFoundKit
	}
	return x, x.events, nil
}

func (k *fakeKit) Follow(ctx context.Context, id string, after uint64, fn func([]protocol.Event) error, idle func() error) error {
	for {
		k.mu.Lock()
		x := k.execs[id]
		if x == nil {
			k.mu.Unlock()
			return errNotFoundKit
		}
		evs, changed := x.events, x.changed
		k.mu.Unlock()
		if uint64(len(evs)) > after {
			batch := evs[after:]
			if err := fn(batch); err != nil {
				return err
			}
			if batch[len(batch)-1].Type.Terminal() {
				return nil
			}
			after = uint64(len(evs))
			continue
		}
		if len(evs) > 0 && evs[len(evs)-1].Type.Terminal() {
			return eventstore.ErrTerminated // as the store's Wait answers: nothing will follow
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
			if idle != nil {
				if err := idle(); err != nil {
					return err
				}
			}
		}
	}
}

// statusOf is the store status of an execution with events evs and metadata.
func kitStatusOf(evs []protocol.Event, metadata map[string]string) eventstore.Status {
	info, _ := json.Marshal(engine.Info{Ability: "chat", Metadata: metadata, CreatedAt: evs[0].Timestamp})
	snap := protocol.Materialize(evs[0].ExecutionID, evs)
	last := evs[len(evs)-1]
	st := eventstore.Status{
		Record:       eventstore.Record{ID: evs[0].ExecutionID, CreatedAt: evs[0].Timestamp, Info: info},
		LastSequence: last.Sequence, Terminal: last.Type.Terminal(), UpdatedAt: last.Timestamp,
		State: snap.Status, Error: snap.Error,
	}
	for _, ev := range evs {
		if ev.Type == protocol.EventRouteSelected {
			var d protocol.RouteSelectedData
			_ = json.Unmarshal(ev.Data, &d)
			st.Route = &protocol.RouteStatus{Deployment: d.Deployment, Provider: d.Provider, Model: d.Model}
			st.Attempts++
		}
	}
	return st
}

func (k *fakeKit) Status(_ context.Context, id string) (eventstore.Status, error) {
	x, evs, err := k.exec(id)
	if err != nil {
		return eventstore.Status{}, err
	}
	return kitStatusOf(evs, x.metadata), nil
}

func (k *fakeKit) Snapshot(_ context.Context, id string) (protocol.Snapshot, error) {
	_, evs, err := k.exec(id)
	if err != nil {
		return protocol.Snapshot{}, err
	}
	return protocol.Materialize(id, evs), nil
}

func (k *fakeKit) Cancel(_ context.Context, id string) (engine.Cancellation, error) {
	x, evs, err := k.exec(id)
	if err != nil {
		return engine.Cancellation{}, err
	}
	if evs[len(evs)-1].Type.Terminal() {
		return engine.Cancellation{Status: kitStatusOf(evs, x.metadata), AlreadyTerminal: true}, nil
	}
	k.appendEvent(id, protocol.EventFailed, `{"error":{"code":"cancelled","message":"the execution was cancelled","retryable":false}}`)
	k.mu.Lock()
	k.cancelled++
	k.mu.Unlock()
	_, evs, _ = k.exec(id)
	return engine.Cancellation{Status: kitStatusOf(evs, x.metadata)}, nil
}

func (k *fakeKit) Remove(ctx context.Context, id string) error {
	if _, err := k.Cancel(ctx, id); err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.execs, id)
	return nil
}

func (k *fakeKit) Models(context.Context) ([]compat.Model, error) { return nil, nil }

func (k *fakeKit) Model(_ context.Context, id string) (compat.Model, bool, error) {
	m, ok := k.models[id]
	return m, ok, nil
}

func (k *fakeKit) Classify(_ *http.Request, err error) (int, *protocol.Error) {
	var pe *protocol.Error
	if errors.As(err, &pe) && pe.Code.Known() {
		return pe.Code.HTTPStatus(), pe
	}
	return http.StatusInternalServerError, protocol.NewError(protocol.CodeInternal, "internal error")
}

func (k *fakeKit) NewStream(w http.ResponseWriter) *compat.Stream {
	return compat.NewStream(w, 5*time.Second)
}

func (k *fakeKit) Logger() logr.Logger { return logr.Discard() }

// serveDoor serves the door's routes over k as the server does: an error a handler
// returns is classified and answered in the door's shape.
func serveDoor(k compat.Kit) http.Handler {
	mux := http.NewServeMux()
	for _, rt := range (Door{}).Routes(k) {
		mux.HandleFunc(rt.Pattern, func(w http.ResponseWriter, r *http.Request) {
			if err := rt.Handle(w, r); err != nil {
				status, pe := k.Classify(r, err)
				rt.WriteError(w, status, pe)
			}
		})
	}
	return mux
}
