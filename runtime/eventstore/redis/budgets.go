package redis

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
)

// Budgets (spec/budgets.md). Every budget key carries the hash tag {budgets}, so that
// one script may change the counters of all the Budgets an admission reserves against,
// and the holds of the execution, in one atomic step:
//
//	<prefix>{budgets}:counter:<name>  string: a counter's value, a decimal integer,
//	                                  expiring at the latest Expires of the holds
//	                                  that touched it (PEXPIREAT, ms)
//	<prefix>{budgets}:holds:<id>      hash: what execution id holds (see holdScript)
//	<prefix>{budgets}:pending         sorted set: the ids of the executions that hold
//	                                  something, scored by the time of their holds in
//	                                  µs on the Redis clock
//
// Counter names come from the runtime and may contain anything, '{', '}', '/', ':'
// and '.' included: only the first {…} of a key picks its slot, and that is ours.
// Hold and Settle are one script each (see scripts.go), Counters one MGET and Pending
// one read-only script.
//
// go-redis sends a script again when its reply is lost: a second run of Hold finds the
// holds of the first and replaces them with the same ones, so it changes nothing more;
// a second run of Settle finds nothing to settle and reports false, having changed
// nothing, although the first run settled.

func (s *Store) budgetBase() string            { return s.prefix + "{budgets}:" }
func (s *Store) counterKey(name string) string { return s.budgetBase() + "counter:" + name }
func (s *Store) holdsKey(id string) string     { return s.budgetBase() + "holds:" + id }
func (s *Store) pendingKey() string            { return s.budgetBase() + "pending" }

// Hold implements eventstore.Budgets.
func (s *Store) Hold(ctx context.Context, id string, holds []eventstore.Hold, note json.RawMessage) error {
	if err := eventstore.CheckHold(id, holds); err != nil {
		return err
	}
	if s.isClosed.Load() {
		return eventstore.ErrClosed
	}
	keys := make([]string, 0, 2+len(holds))
	keys = append(keys, s.holdsKey(id), s.pendingKey())
	args := make([]any, 0, 3+5*len(holds))
	args = append(args, s.counterKey(""), id)
	for _, h := range holds {
		keys = append(keys, s.counterKey(h.Counter))
		args = append(args, h.Counter, h.Unit, h.Amount, h.Limit, ceilMillis(h.Expires))
	}
	if note != nil {
		args = append(args, []byte(note))
	}
	reply, err := holdScript.Run(ctx, s.client, keys, args...).Slice()
	if err != nil {
		return s.fail(err, "hold budget for %s", id)
	}
	if ok, _ := reply[0].(int64); ok == 1 {
		return nil
	}
	if len(reply) != 3 {
		return fmt.Errorf("hold budget for %s: %w", id, errCorrupt)
	}
	index, _ := reply[1].(int64)
	used, _ := reply[2].(int64)
	return &eventstore.HoldRefusedError{Index: int(index), Used: used}
}

// Settle implements eventstore.Budgets.
func (s *Store) Settle(ctx context.Context, id string, spent map[string]int64) (bool, error) {
	if err := eventstore.CheckSettle(id, spent); err != nil {
		return false, err
	}
	if s.isClosed.Load() {
		return false, eventstore.ErrClosed
	}
	args := make([]any, 0, 2+2*len(spent))
	args = append(args, s.counterKey(""), id)
	for unit, n := range spent {
		args = append(args, unit, n)
	}
	settled, err := settleScript.Run(ctx, s.client, []string{s.holdsKey(id), s.pendingKey()}, args...).Int64()
	if err != nil {
		return false, s.fail(err, "settle budget of %s", id)
	}
	return settled == 1, nil
}

// Pending implements eventstore.Budgets.
func (s *Store) Pending(ctx context.Context, before time.Time, limit int) ([]eventstore.PendingHold, error) {
	if s.isClosed.Load() {
		return nil, eventstore.ErrClosed
	}
	// Since is a whole number of µs: since < before exactly when since < ⌈before⌉.
	bound := before.UnixMicro()
	if before.After(time.UnixMicro(bound)) {
		bound++
	}
	reply, err := pendingScript.Run(ctx, s.client, []string{s.pendingKey()}, bound, eventstore.PendingLimit(limit), s.holdsKey("")).Slice()
	if err != nil {
		return nil, s.fail(err, "list pending budget holds")
	}
	pending := make([]eventstore.PendingHold, 0, len(reply))
	for _, r := range reply {
		vals, _ := r.([]any)
		if len(vals) == 0 {
			return nil, fmt.Errorf("list pending budget holds: %w", errCorrupt)
		}
		var p eventstore.PendingHold
		p.ID, _ = vals[0].(string)
		if len(vals) > 1 {
			us, err := strconv.ParseInt(fmt.Sprint(vals[1]), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("list pending budget holds: since of %s: %w", p.ID, err)
			}
			p.Since = time.UnixMicro(us)
		}
		if len(vals) > 2 {
			if note, ok := vals[2].(string); ok {
				p.Note = json.RawMessage(note)
			}
		}
		pending = append(pending, p)
	}
	return pending, nil
}

// Counters implements eventstore.Budgets: one MGET.
func (s *Store) Counters(ctx context.Context, names []string) ([]int64, error) {
	if s.isClosed.Load() {
		return nil, eventstore.ErrClosed
	}
	values := make([]int64, len(names))
	if len(names) == 0 {
		return values, nil
	}
	keys := make([]string, len(names))
	for i, name := range names {
		keys[i] = s.counterKey(name)
	}
	reply, err := s.client.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, s.fail(err, "read budget counters")
	}
	for i, v := range reply {
		str, ok := v.(string)
		if !ok {
			continue // absent: never used, or expired
		}
		n, err := strconv.ParseInt(str, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("read budget counter %s: %w", names[i], err)
		}
		values[i] = n
	}
	return values, nil
}

// ceilMillis returns t in ms since the epoch, rounded up, so that a counter expires
// no earlier than t.
func ceilMillis(t time.Time) int64 {
	ms := t.UnixMilli()
	if t.After(time.UnixMilli(ms)) {
		ms++
	}
	return ms
}
