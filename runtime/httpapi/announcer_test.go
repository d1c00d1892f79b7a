package httpapi_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/httpapi"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// announcer is an eventstore.Announcer whose wake-ups carried every event of the store
// it reads, as the Redis store's do while a stream waits: it hands over what Read would
// return, and counts the events it handed over.
type announcer struct {
	store  eventstore.Reader
	handed atomic.Int64
}

func (a *announcer) Announced(id string, after uint64, limit int) []protocol.Event {
	evs, err := a.store.Read(context.Background(), id, after, limit)
	if err != nil || len(evs) == 0 {
		return nil
	}
	a.handed.Add(int64(len(evs)))
	return evs
}

// TestWokenStreamTakesAnnouncedEvents: a stream woken by a new event takes it from the
// store's Announcer (Config.Announcer), not from a Read.
func TestWokenStreamTakesAnnouncedEvents(t *testing.T) {
	a := &announcer{}
	e := newEnv(t, withAPI(func(c *httpapi.Config) { c.Announcer = a }))
	a.store = e.store
	g := newGate()
	e.setScript(g.script)
	id := e.submit(t, chat("announce"))

	st, err := e.client.Events(t.Context(), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var types []protocol.EventType
	next := func() protocol.EventType {
		t.Helper()
		if !st.Next() {
			t.Fatalf("stream: %v", st.Err())
		}
		types = append(types, st.Event().Type)
		return st.Event().Type
	}
	for range 2 { // two events: the stream is live and waits
		next()
	}
	before := a.handed.Load()
	g.delta(t, "announced")
	if typ := next(); typ != protocol.EventOutputDelta {
		t.Fatalf("events %v, want the delta next", types)
	}
	if a.handed.Load() == before {
		t.Error("the woken stream read the delta from the store, not from the Announcer")
	}
	g.finish()
	for next() != protocol.EventCompleted {
	}
}
