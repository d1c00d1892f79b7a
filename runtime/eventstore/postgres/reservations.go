package postgres

import (
	"bytes"
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
)

// Advisory lock classes (the first key of pg_advisory_xact_lock(int, int)); the second
// key is hashtext of the schema and the name locked. Two names of one hash share a
// lock, which only makes them wait for each other.
const (
	lockScope int32 = 0x5342_0001 // a reservation scope, whose count Reserve checks
	lockHolds int32 = 0x5342_0002 // an execution's budget holds
)

// uniqueViolation is the SQLSTATE of a duplicate key.
const uniqueViolation = "23505"

// Reserve implements eventstore.Reservations: one transaction under the scope's lock,
// so that its count of unexpired reservations (an index range of reservations_scope)
// is exact whichever replicas reserve. A concurrent Reserve of the same key in another
// scope may insert first: then the insert fails on the key, and Reserve runs again,
// finding that reservation.
func (s *Store) Reserve(ctx context.Context, key string, r eventstore.Reservation, ttl time.Duration, limit int) (eventstore.Reservation, bool, error) {
	if err := eventstore.CheckReserve(key, ttl); err != nil {
		return eventstore.Reservation{}, false, err
	}
	if s.isClosed.Load() {
		return eventstore.Reservation{}, false, eventstore.ErrClosed
	}
	if !storable(key, r.Scope, r.Fingerprint, r.ExecutionID) {
		return eventstore.Reservation{}, false, unstorable("reserve")
	}
	for {
		got, reserved, err := s.reserve(ctx, key, r, ttl, limit)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == uniqueViolation {
			continue
		}
		if err != nil {
			var limited *eventstore.ReservationLimitError
			if !errors.As(err, &limited) {
				err = s.fail(err, "reserve %s", key)
			}
		}
		return got, reserved, err
	}
}

func (s *Store) reserve(ctx context.Context, key string, r eventstore.Reservation, ttl time.Duration, limit int) (eventstore.Reservation, bool, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return eventstore.Reservation{}, false, err
	}
	defer rollback(tx)
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, lockScope, s.schema+":"+r.Scope); err != nil {
		return eventstore.Reservation{}, false, err
	}
	var (
		cur     eventstore.Reservation
		cs      int64
		cns     int32
		expired bool
	)
	err = tx.QueryRow(ctx, s.sql(`
		SELECT scope, fingerprint, execution_id, response, created_s, created_ns, created,
			expires_at <= statement_timestamp()
		FROM {s}.reservations WHERE key = $1 FOR UPDATE`), key).Scan(
		&cur.Scope, &cur.Fingerprint, &cur.ExecutionID, &cur.Response, &cs, &cns, &cur.Created, &expired)
	switch {
	case err == nil && !expired:
		cur.CreatedAt = joinTime(cs, cns)
		// The same execution and fingerprint: a repeat of the Reserve that stored it.
		return cur, cur.ExecutionID == r.ExecutionID && cur.Fingerprint == r.Fingerprint, nil
	case err == nil:
		// Expired, and the sweep has not reached it yet: it counts as absent.
		if _, err := tx.Exec(ctx, s.sql(`DELETE FROM {s}.reservations WHERE key = $1`), key); err != nil {
			return eventstore.Reservation{}, false, err
		}
	case !errors.Is(err, pgx.ErrNoRows):
		return eventstore.Reservation{}, false, err
	}
	if limit > 0 {
		var (
			count    int64
			earliest *int64 // µs until the earliest expiry
		)
		err := tx.QueryRow(ctx, s.sql(`
			SELECT count(*), (extract(epoch FROM min(expires_at) - statement_timestamp()) * 1000000)::bigint
			FROM {s}.reservations WHERE scope = $1 AND expires_at > statement_timestamp()`), r.Scope).Scan(&count, &earliest)
		if err != nil {
			return eventstore.Reservation{}, false, err
		}
		if count >= int64(limit) {
			wait := time.Duration(0)
			if earliest != nil {
				wait = max(time.Duration(*earliest)*time.Microsecond, 0)
			}
			return eventstore.Reservation{}, false, &eventstore.ReservationLimitError{Limit: limit, RetryAfter: wait}
		}
	}
	sec, nsec := splitTime(r.CreatedAt)
	if _, err := tx.Exec(ctx, s.sql(`
		INSERT INTO {s}.reservations (key, scope, fingerprint, execution_id, response, created_s, created_ns, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, statement_timestamp() + $8::interval)`),
		key, r.Scope, r.Fingerprint, r.ExecutionID, nullable(r.Response), sec, nsec, interval(ttl)); err != nil {
		return eventstore.Reservation{}, false, err
	}
	if err := tx.Commit(ctx); err != nil {
		return eventstore.Reservation{}, false, err
	}
	r.Response = bytes.Clone(r.Response)
	r.Created = false // only Create marks it
	return r, true, nil
}

// Release implements eventstore.Reservations: the row is deleted, so a released
// reservation leaves its scope's count at once and costs nothing from then on.
func (s *Store) Release(ctx context.Context, key, executionID string) error {
	if s.isClosed.Load() {
		return eventstore.ErrClosed
	}
	if !storable(key, executionID) {
		return nil // never stored
	}
	if _, err := s.pool.Exec(ctx, s.sql(`DELETE FROM {s}.reservations WHERE key = $1 AND execution_id = $2`), key, executionID); err != nil {
		return s.fail(err, "release %s", key)
	}
	return nil
}

// Secret implements eventstore.Secrets: a read of the unexpired secret, and only when
// there is none one upsert that stores the candidate unless a concurrent caller stored
// one first, and returns what is stored either way.
func (s *Store) Secret(ctx context.Context, name string, candidate []byte, ttl time.Duration) ([]byte, error) {
	if err := eventstore.CheckSecret(name, candidate, ttl); err != nil {
		return nil, err
	}
	if s.isClosed.Load() {
		return nil, eventstore.ErrClosed
	}
	if !storable(name) {
		return nil, unstorable("secret")
	}
	var value []byte
	err := s.pool.QueryRow(ctx, s.sql(`SELECT value FROM {s}.secrets WHERE name = $1 AND expires_at > statement_timestamp()`), name).Scan(&value)
	if err == nil {
		return value, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, s.fail(err, "secret %s", name)
	}
	err = s.pool.QueryRow(ctx, s.sql(`
		INSERT INTO {s}.secrets AS c (name, value, expires_at) VALUES ($1, $2, statement_timestamp() + $3::interval)
		ON CONFLICT (name) DO UPDATE SET
			value = CASE WHEN c.expires_at <= statement_timestamp() THEN excluded.value ELSE c.value END,
			expires_at = CASE WHEN c.expires_at <= statement_timestamp() THEN excluded.expires_at ELSE c.expires_at END
		RETURNING c.value`), name, candidate, interval(ttl)).Scan(&value)
	if err != nil {
		return nil, s.fail(err, "secret %s", name)
	}
	return value, nil
}
