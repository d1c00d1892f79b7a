package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
)

// Budgets (spec/budgets.md): the rows of budget_counters and budget_holds. Hold and
// Settle are each one transaction that first takes the execution's advisory lock
// (lockHolds), so that an execution's holds change one call at a time, and then locks
// every counter it touches in name order, the same order for every transaction, so that
// transactions sharing counters wait for each other and never deadlock. A counter whose
// expires_at has passed counts as absent; expiredCounter marks a row that Hold locked
// before it existed.

// expiredCounter is the expires_at of a counter row made only to be locked: long past.
const expiredCounter = "epoch"

// heldAmount is one hold as budget_holds keeps it.
type heldAmount struct {
	Counter string `json:"c"`
	Unit    string `json:"u"`
	Amount  int64  `json:"a"`
}

// counterRow is a locked counter.
type counterRow struct {
	value   int64
	alive   bool // not expired
	expires time.Time
}

// Hold implements eventstore.Budgets.
func (s *Store) Hold(ctx context.Context, id string, holds []eventstore.Hold, note json.RawMessage) error {
	if err := eventstore.CheckHold(id, holds); err != nil {
		return err
	}
	if s.isClosed.Load() {
		return eventstore.ErrClosed
	}
	if !storable(id) {
		return unstorable("hold budget")
	}
	for _, h := range holds {
		if !storable(h.Counter, h.Unit) {
			return unstorable("hold budget for " + id)
		}
	}
	err := s.hold(ctx, id, holds, note)
	var refused *eventstore.HoldRefusedError
	if err != nil && !errors.As(err, &refused) {
		return s.fail(err, "hold budget for %s", id)
	}
	return err
}

func (s *Store) hold(ctx context.Context, id string, holds []eventstore.Hold, note json.RawMessage) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer rollback(tx)
	prev, err := s.lockHolds(ctx, tx, id, false)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(prev)+len(holds))
	for _, h := range prev {
		names = append(names, h.Counter)
	}
	for _, h := range holds {
		names = append(names, h.Counter)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	counters := map[string]*counterRow{}
	if len(names) > 0 {
		// The rows of new counters are made here, expired, so that they can be locked
		// like the others; a refusal rolls them back.
		rows, err := tx.Query(ctx, s.sql(`
			INSERT INTO {s}.budget_counters AS c (name, value, expires_at)
			SELECT n, 0, '`+expiredCounter+`' FROM unnest($1::text[]) AS n ORDER BY n
			ON CONFLICT (name) DO UPDATE SET name = excluded.name
			RETURNING c.name, c.value, c.expires_at > statement_timestamp(), c.expires_at`), names)
		if err != nil {
			return err
		}
		if counters, err = scanCounters(rows); err != nil {
			return err
		}
	}
	back := make(map[string]int64, len(prev))
	for _, h := range prev {
		back[h.Counter] = h.Amount
	}
	for i, h := range holds {
		c := counters[h.Counter]
		used := int64(0)
		if c.alive {
			used = c.value
		}
		if h.Limit > 0 && max(used-back[h.Counter], 0)+h.Amount > h.Limit {
			return &eventstore.HoldRefusedError{Index: i, Used: used}
		}
	}
	for _, h := range prev {
		if c := counters[h.Counter]; c.alive {
			c.value = max(c.value-h.Amount, 0)
		}
	}
	for _, h := range holds {
		c := counters[h.Counter]
		if !c.alive {
			*c = counterRow{alive: true} // new, or expired and not swept yet: it starts again
		}
		c.value += h.Amount
		if h.Expires.After(c.expires) {
			c.expires = h.Expires
		}
	}
	if err := s.writeCounters(ctx, tx, counters); err != nil {
		return err
	}
	if len(holds) == 0 {
		if _, err := tx.Exec(ctx, s.sql(`DELETE FROM {s}.budget_holds WHERE execution_id = $1`), id); err != nil {
			return err
		}
	} else {
		held := make([]heldAmount, len(holds))
		for i, h := range holds {
			held[i] = heldAmount{Counter: h.Counter, Unit: h.Unit, Amount: h.Amount}
		}
		encoded, err := json.Marshal(held)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, s.sql(`
			INSERT INTO {s}.budget_holds (execution_id, holds, since, note) VALUES ($1, $2, statement_timestamp(), $3)
			ON CONFLICT (execution_id) DO UPDATE SET holds = excluded.holds, since = excluded.since, note = excluded.note`),
			id, encoded, nullable(note)); err != nil {
			return err
		}
	}
	return tx.Commit(ctx)
}

// lockHolds takes execution id's advisory lock and returns what it holds; with take,
// it also forgets them (Settle).
func (s *Store) lockHolds(ctx context.Context, tx pgx.Tx, id string, take bool) ([]heldAmount, error) {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, lockHolds, s.schema+":"+id); err != nil {
		return nil, err
	}
	q := `SELECT holds FROM {s}.budget_holds WHERE execution_id = $1`
	if take {
		q = `DELETE FROM {s}.budget_holds WHERE execution_id = $1 RETURNING holds`
	}
	var encoded []byte
	err := tx.QueryRow(ctx, s.sql(q), id).Scan(&encoded)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, err
	}
	var held []heldAmount
	if err := json.Unmarshal(encoded, &held); err != nil {
		return nil, fmt.Errorf("holds of %s: %w", id, errCorrupt)
	}
	return held, nil
}

// scanCounters reads locked counter rows: name, value, alive, expires_at.
func scanCounters(rows pgx.Rows) (map[string]*counterRow, error) {
	counters := map[string]*counterRow{}
	var (
		name string
		c    counterRow
	)
	_, err := pgx.ForEachRow(rows, []any{&name, &c.value, &c.alive, &c.expires}, func() error {
		row := c
		counters[name] = &row
		return nil
	})
	return counters, err
}

// writeCounters stores the values and expiries of the locked counters.
func (s *Store) writeCounters(ctx context.Context, tx pgx.Tx, counters map[string]*counterRow) error {
	if len(counters) == 0 {
		return nil
	}
	names := make([]string, 0, len(counters))
	values := make([]int64, 0, len(counters))
	expires := make([]time.Time, 0, len(counters))
	for name, c := range counters {
		names, values, expires = append(names, name), append(values, c.value), append(expires, c.expires)
	}
	_, err := tx.Exec(ctx, s.sql(`
		UPDATE {s}.budget_counters c SET value = u.value, expires_at = u.expires
		FROM unnest($1::text[], $2::bigint[], $3::timestamptz[]) AS u(name, value, expires)
		WHERE c.name = u.name`), names, values, expires)
	return err
}

// Settle implements eventstore.Budgets: the holds row is taken (deleted) under the
// execution's lock, so of two replicas settling at once one finds it and the other
// nothing.
func (s *Store) Settle(ctx context.Context, id string, spent map[string]int64) (bool, error) {
	if err := eventstore.CheckSettle(id, spent); err != nil {
		return false, err
	}
	if s.isClosed.Load() {
		return false, eventstore.ErrClosed
	}
	if !storable(id) {
		return false, nil // it never held anything
	}
	settled, err := s.settle(ctx, id, spent)
	if err != nil {
		return false, s.fail(err, "settle budget of %s", id)
	}
	return settled, nil
}

func (s *Store) settle(ctx context.Context, id string, spent map[string]int64) (bool, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer rollback(tx)
	held, err := s.lockHolds(ctx, tx, id, true)
	if err != nil || held == nil {
		return false, err
	}
	names := make([]string, len(held))
	for i, h := range held {
		names[i] = h.Counter
	}
	rows, err := tx.Query(ctx, s.sql(`
		SELECT name, value, expires_at > statement_timestamp(), expires_at FROM {s}.budget_counters
		WHERE name = ANY($1) ORDER BY name FOR UPDATE`), names)
	if err != nil {
		return false, err
	}
	counters, err := scanCounters(rows)
	if err != nil {
		return false, err
	}
	for _, h := range held {
		// A counter that expired since stays gone: its window is over.
		if c := counters[h.Counter]; c != nil && c.alive {
			c.value = max(c.value+spent[h.Unit]-h.Amount, 0)
		}
	}
	if err := s.writeCounters(ctx, tx, counters); err != nil {
		return false, err
	}
	return true, tx.Commit(ctx)
}

// Pending implements eventstore.Budgets: a range of the index budget_holds_since.
func (s *Store) Pending(ctx context.Context, before time.Time, limit int) ([]eventstore.PendingHold, error) {
	if s.isClosed.Load() {
		return nil, eventstore.ErrClosed
	}
	rows, err := s.pool.Query(ctx, s.sql(`
		SELECT execution_id, since, note FROM {s}.budget_holds
		WHERE since < $1 ORDER BY since, execution_id LIMIT $2`), before, eventstore.PendingLimit(limit))
	if err != nil {
		return nil, s.fail(err, "list pending holds")
	}
	pending, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (eventstore.PendingHold, error) {
		var p eventstore.PendingHold
		var note []byte
		err := r.Scan(&p.ID, &p.Since, &note)
		p.Note = note
		return p, err
	})
	if err != nil {
		return nil, s.fail(err, "list pending holds")
	}
	return pending, nil
}

// Counters implements eventstore.Budgets.
func (s *Store) Counters(ctx context.Context, names []string) ([]int64, error) {
	if s.isClosed.Load() {
		return nil, eventstore.ErrClosed
	}
	values := make([]int64, len(names))
	var asked []string // the names that can exist: the others count 0
	for _, n := range names {
		if storable(n) {
			asked = append(asked, n)
		}
	}
	if len(asked) == 0 {
		return values, nil
	}
	rows, err := s.pool.Query(ctx, s.sql(`
		SELECT name, value FROM {s}.budget_counters WHERE name = ANY($1) AND expires_at > statement_timestamp()`), asked)
	if err != nil {
		return nil, s.fail(err, "read budget counters")
	}
	found := map[string]int64{}
	var (
		name  string
		value int64
	)
	if _, err := pgx.ForEachRow(rows, []any{&name, &value}, func() error {
		found[name] = value
		return nil
	}); err != nil {
		return nil, s.fail(err, "read budget counters")
	}
	for i, n := range names {
		values[i] = found[n]
	}
	return values, nil
}
