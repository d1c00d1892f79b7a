package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
)

// Leases (spec/events.md, "Ownership and orphans"): the lease columns of the execution's
// row, on the database's clock. Each change is one UPDATE whose WHERE clause is its
// check; when it changes nothing, a read of the row tells why (diagnose). Fences only
// grow and an execution only becomes terminal, so that read gives the reason the
// UPDATE found.

// Acquire implements eventstore.Leases. Of concurrent Acquires, PostgreSQL makes the
// others wait for the first one's row lock and then evaluates their WHERE clause on
// the row it wrote, where the lease is no longer expired: exactly one wins.
func (s *Store) Acquire(ctx context.Context, id, owner string, ttl time.Duration) (eventstore.Lease, error) {
	if err := eventstore.CheckAcquire(id, owner, ttl); err != nil {
		return eventstore.Lease{}, err
	}
	if s.isClosed.Load() {
		return eventstore.Lease{}, eventstore.ErrClosed
	}
	switch {
	case !storable(owner):
		return eventstore.Lease{}, unstorable("acquire lease of " + id)
	case !storable(id):
		return eventstore.Lease{}, notFound(id)
	}
	lease, err := scanLease(s.pool.QueryRow(ctx, s.sql(`
		UPDATE {s}.executions e SET lease_owner = $2, lease_fence = lease_fence + 1,
			lease_expires = statement_timestamp() + $3::interval
		WHERE e.id = $1 AND NOT e.terminal AND `+live+`
			AND (e.lease_expires IS NULL OR e.lease_expires <= statement_timestamp())
		RETURNING e.lease_owner, e.lease_fence, e.lease_expires`), id, owner, interval(ttl)))
	if err == nil {
		return lease, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return eventstore.Lease{}, s.fail(err, "acquire lease of %s", id)
	}
	cur, err := s.leaseRow(ctx, id, "acquire lease of")
	switch {
	case err != nil:
		return eventstore.Lease{}, err
	case cur.terminal:
		return eventstore.Lease{}, fmt.Errorf("acquire lease of %s: %w", id, eventstore.ErrTerminated)
	}
	return eventstore.Lease{}, fmt.Errorf("acquire lease of %s: held by %s until %v: %w",
		id, cur.lease.Owner, cur.lease.Expires, eventstore.ErrLeaseHeld)
}

// Renew implements eventstore.Leases. NoFence names no lease: ErrInvalid.
func (s *Store) Renew(ctx context.Context, id string, fence eventstore.Fence, ttl time.Duration) (eventstore.Lease, error) {
	if err := eventstore.CheckRenew(id, fence, ttl); err != nil {
		return eventstore.Lease{}, err
	}
	if s.isClosed.Load() {
		return eventstore.Lease{}, eventstore.ErrClosed
	}
	if !storable(id) {
		return eventstore.Lease{}, notFound(id)
	}
	lease, err := scanLease(s.pool.QueryRow(ctx, s.sql(`
		UPDATE {s}.executions e SET lease_expires = statement_timestamp() + $3::interval
		WHERE e.id = $1 AND e.lease_fence = $2 AND NOT e.terminal AND `+live+`
		RETURNING e.lease_owner, e.lease_fence, e.lease_expires`), id, int64(fence), interval(ttl)))
	if err == nil {
		return lease, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return eventstore.Lease{}, s.fail(err, "renew lease of %s", id)
	}
	cur, err := s.fencedRow(ctx, id, fence, "renew lease of")
	if err != nil {
		return eventstore.Lease{}, err
	}
	if cur.terminal {
		return eventstore.Lease{}, fmt.Errorf("renew lease of %s: %w", id, eventstore.ErrTerminated)
	}
	// The fence is current and the execution running: the row changed between the
	// statements only by a renewal of this very lease. Report it as it is now.
	return cur.lease, nil
}

// ReleaseLease implements eventstore.Leases. NoFence names no lease: ErrInvalid.
func (s *Store) ReleaseLease(ctx context.Context, id string, fence eventstore.Fence) error {
	if err := eventstore.CheckReleaseLease(id, fence); err != nil {
		return err
	}
	if s.isClosed.Load() {
		return eventstore.ErrClosed
	}
	if !storable(id) {
		return notFound(id)
	}
	tag, err := s.pool.Exec(ctx, s.sql(`
		UPDATE {s}.executions e SET lease_expires = statement_timestamp()
		WHERE e.id = $1 AND e.lease_fence = $2 AND NOT e.terminal AND `+live+`
			AND e.lease_expires > statement_timestamp()`), id, int64(fence))
	if err != nil {
		return s.fail(err, "release lease of %s", id)
	}
	if tag.RowsAffected() > 0 {
		return nil
	}
	// Terminal or expired already: nothing to do, once the fence is current.
	_, err = s.fencedRow(ctx, id, fence, "release lease of")
	return err
}

// Orphans implements eventstore.Leases: a range of the partial index executions_orphans,
// O(log n + limit).
func (s *Store) Orphans(ctx context.Context, limit int) ([]string, error) {
	if s.isClosed.Load() {
		return nil, eventstore.ErrClosed
	}
	rows, err := s.pool.Query(ctx, s.sql(`
		SELECT id FROM {s}.executions
		WHERE NOT terminal AND lease_fence > 0 AND lease_expires <= statement_timestamp()
		ORDER BY lease_expires, id LIMIT $1`), eventstore.OrphanLimit(limit))
	if err != nil {
		return nil, s.fail(err, "list orphans")
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, s.fail(err, "list orphans")
	}
	return ids, nil
}

// SetRemote implements eventstore.Leases.
func (s *Store) SetRemote(ctx context.Context, id string, fence eventstore.Fence, handle json.RawMessage) error {
	if s.isClosed.Load() {
		return eventstore.ErrClosed
	}
	if !storable(id) {
		return notFound(id)
	}
	tag, err := s.pool.Exec(ctx, s.sql(`
		UPDATE {s}.executions e SET remote = $3
		WHERE e.id = $1 AND e.lease_fence = $2 AND NOT e.terminal AND `+live), id, int64(fence), nullable(handle))
	if err != nil {
		return s.fail(err, "set remote of %s", id)
	}
	if tag.RowsAffected() > 0 {
		return nil
	}
	if _, err := s.fencedRow(ctx, id, fence, "set remote of"); err != nil {
		return err
	}
	return fmt.Errorf("set remote of %s: %w", id, eventstore.ErrTerminated)
}

// leaseState is what diagnose reads of an execution's row.
type leaseState struct {
	terminal bool
	lease    eventstore.Lease
}

// leaseRow reads the lease of execution id for op: ErrNotFound if it is unknown or
// past its retention.
func (s *Store) leaseRow(ctx context.Context, id, op string) (leaseState, error) {
	var (
		st      leaseState
		owner   string
		fence   int64
		expires *time.Time
	)
	err := s.pool.QueryRow(ctx, s.sql(`
		SELECT e.terminal, e.lease_owner, e.lease_fence, e.lease_expires FROM {s}.executions e
		WHERE e.id = $1 AND `+live), id).Scan(&st.terminal, &owner, &fence, &expires)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return st, notFound(id)
	case err != nil:
		return st, s.fail(err, "%s %s", op, id)
	}
	st.lease = makeLease(owner, fence, expires)
	return st, nil
}

// fencedRow is leaseRow that also checks that fence is current (ErrLeaseLost).
func (s *Store) fencedRow(ctx context.Context, id string, fence eventstore.Fence, op string) (leaseState, error) {
	st, err := s.leaseRow(ctx, id, op)
	if err == nil && st.lease.Fence != fence {
		err = fmt.Errorf("%s %s: fence %d, current is %d: %w", op, id, fence, st.lease.Fence, eventstore.ErrLeaseLost)
	}
	return st, err
}
