package memory

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
)

// Budgets (spec/budgets.md): the counters of spend limits and what each execution
// holds on them, under one lock of their own (budgetMu), so that a Hold across several
// counters is one atomic step, as a Redis script is in the Redis store. A counter whose
// Expires has passed on the store's clock counts as absent at once; the sweep forgets
// it (counterExpires).

// budgetCounter is one counter's value and when it may be forgotten.
type budgetCounter struct {
	value   int64
	expires time.Time
}

// budgetHolds is what one execution holds: its holds of its last Hold, when it made
// them, and that call's note.
type budgetHolds struct {
	holds []eventstore.Hold
	since time.Time
	note  json.RawMessage
}

// counter returns the value of counter name at now: 0 for one never used or expired.
// Called with s.budgetMu held.
func (s *Store) counter(name string, now time.Time) int64 {
	c, ok := s.counters[name]
	if !ok || !now.Before(c.expires) {
		return 0
	}
	return c.value
}

// Hold implements eventstore.Budgets. Every counter is checked before any is changed,
// so a refusal changes nothing.
func (s *Store) Hold(_ context.Context, id string, holds []eventstore.Hold, note json.RawMessage) error {
	if err := eventstore.CheckHold(id, holds); err != nil {
		return err
	}
	if s.isClosed.Load() {
		return eventstore.ErrClosed
	}
	now := s.now()
	s.budgetMu.Lock()
	defer s.budgetMu.Unlock()
	prev := s.budgetHolds[id]
	back := make(map[string]int64, len(prev.holds))
	for _, h := range prev.holds {
		back[h.Counter] = h.Amount
	}
	for i, h := range holds {
		used := s.counter(h.Counter, now)
		if h.Limit > 0 && max(used-back[h.Counter], 0)+h.Amount > h.Limit {
			return &eventstore.HoldRefusedError{Index: i, Used: used}
		}
	}
	for _, h := range prev.holds {
		if c, ok := s.counters[h.Counter]; ok && now.Before(c.expires) {
			c.value = max(c.value-h.Amount, 0)
			s.counters[h.Counter] = c
		}
	}
	for _, h := range holds {
		c, ok := s.counters[h.Counter]
		if !ok || !now.Before(c.expires) {
			c = budgetCounter{} // new, or expired and not swept yet: it starts again
		}
		c.value += h.Amount
		if h.Expires.After(c.expires) {
			c.expires = h.Expires
			s.counterExpires.add(h.Expires, h.Counter)
		}
		s.counters[h.Counter] = c
	}
	if len(holds) == 0 {
		delete(s.budgetHolds, id)
		return nil
	}
	s.budgetHolds[id] = budgetHolds{holds: slices.Clone(holds), since: now, note: bytes.Clone(note)}
	return nil
}

// Settle implements eventstore.Budgets.
func (s *Store) Settle(_ context.Context, id string, spent map[string]int64) (bool, error) {
	if err := eventstore.CheckSettle(id, spent); err != nil {
		return false, err
	}
	if s.isClosed.Load() {
		return false, eventstore.ErrClosed
	}
	now := s.now()
	s.budgetMu.Lock()
	defer s.budgetMu.Unlock()
	held, ok := s.budgetHolds[id]
	if !ok {
		return false, nil
	}
	for _, h := range held.holds {
		if c, ok := s.counters[h.Counter]; ok && now.Before(c.expires) {
			c.value = max(c.value+spent[h.Unit]-h.Amount, 0)
			s.counters[h.Counter] = c
		}
	}
	delete(s.budgetHolds, id)
	return true, nil
}

// Pending implements eventstore.Budgets. It looks at every execution that holds
// something: those are the running ones, and the sweeper that calls it runs now and
// then.
func (s *Store) Pending(_ context.Context, before time.Time, limit int) ([]eventstore.PendingHold, error) {
	if s.isClosed.Load() {
		return nil, eventstore.ErrClosed
	}
	limit = eventstore.PendingLimit(limit)
	s.budgetMu.Lock()
	var pending []eventstore.PendingHold
	for id, held := range s.budgetHolds {
		if held.since.Before(before) {
			pending = append(pending, eventstore.PendingHold{ID: id, Since: held.since, Note: bytes.Clone(held.note)})
		}
	}
	s.budgetMu.Unlock()
	slices.SortFunc(pending, func(a, b eventstore.PendingHold) int {
		return cmp.Or(a.Since.Compare(b.Since), cmp.Compare(a.ID, b.ID))
	})
	if len(pending) > limit {
		pending = pending[:limit]
	}
	return pending, nil
}

// Counters implements eventstore.Budgets.
func (s *Store) Counters(_ context.Context, names []string) ([]int64, error) {
	if s.isClosed.Load() {
		return nil, eventstore.ErrClosed
	}
	now := s.now()
	values := make([]int64, len(names))
	s.budgetMu.Lock()
	defer s.budgetMu.Unlock()
	for i, name := range names {
		values[i] = s.counter(name, now)
	}
	return values, nil
}

// expireCounters forgets the counters that expired at or before now. A counter whose
// expiry was moved later has an entry in the queue for each expiry: the earlier ones
// find it unexpired and leave it. Called with s.budgetMu held.
func (s *Store) expireCounters(now time.Time) {
	for _, name := range s.counterExpires.due(now) {
		if c, ok := s.counters[name]; ok && !now.Before(c.expires) {
			delete(s.counters, name)
		}
	}
}
