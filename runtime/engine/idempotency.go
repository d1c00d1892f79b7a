package engine

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// Idempotency keys (spec/http-api.md, "Idempotency"): Submit reserves a submission's key
// in the store before anything else, replays the execution of a key used before for the
// same request, and releases the key of a submission it refused.

const (
	// DefaultIdempotencyTTL is how long an idempotency key is remembered unless
	// Config.IdempotencyTTL says otherwise: the default, and least, --idempotency-ttl.
	DefaultIdempotencyTTL = 24 * time.Hour
	// DefaultMaxReservationsPerPrincipal is the default of
	// --max-reservations-per-principal (Config.MaxReservations): about 9 MB of the
	// memory store at the longest keys (spec/http-api.md, "Idempotency").
	DefaultMaxReservationsPerPrincipal = 10_000
)

const (
	// defaultReplayWait bounds how long a duplicate waits for the outcome of the
	// request that reserved its key: the execution being created (then it is replayed)
	// or the key being released (then the duplicate proceeds as if it were first).
	// Creation takes microseconds to milliseconds; a duplicate still without an outcome
	// after this gets conflict, retryable, rather than an execution that may never
	// exist.
	defaultReplayWait = 10 * time.Second
	// replayPoll is the first interval at which a waiting duplicate checks again; it
	// doubles up to replayPollMax.
	replayPoll    = 2 * time.Millisecond
	replayPollMax = 100 * time.Millisecond
	// releaseTries bounds the reads releaseUnlessCreated makes to learn whether a
	// refused submission created its execution after all.
	releaseTries = 3
	// minKeysRetryAfter is the least retry_after_ms of errTooManyKeys, so that a
	// caller whose earliest key is about to expire does not retry in a busy loop.
	minKeysRetryAfter = time.Second
)

func errKeyReused() *protocol.Error {
	return protocol.NewError(protocol.CodeIdempotencyKeyReused, "Idempotency-Key: already used for a different request body")
}

// errInProgress answers a duplicate whose key's first request has neither created its
// execution nor released the key within the replay wait (conflict, retryable).
func errInProgress() *protocol.Error {
	e := protocol.NewError(protocol.CodeConflict, "Idempotency-Key: the first request with this key is still being processed; retry later")
	e.RetryAfterMs = 1000
	return e
}

// errTooManyKeys answers a submission with a new key from a caller whose scope holds
// Config.MaxReservations unexpired reservations already (rate_limited). The store says
// when the earliest of them expires: a retry finds room then, if no refused submission
// of the caller's has made room before.
func errTooManyKeys(full *eventstore.ReservationLimitError) *protocol.Error {
	e := protocol.NewError(protocol.CodeRateLimited, "Idempotency-Key: too many of this caller's keys are remembered; retry later")
	wait := max(full.RetryAfter, minKeysRetryAfter)
	e.RetryAfterMs = int64((wait + time.Millisecond - 1) / time.Millisecond)
	return e
}

// reservationKey is the store key of idem's key. Keys never contain a space, so the
// first space separates scope and key whatever a principal's name holds. Reservations
// outlive a version of the runtime: the form must not change.
func reservationKey(idem Idempotency) string { return idem.Scope + " " + idem.Key }

// reservedExecution is what a reservation keeps of its execution
// (eventstore.Reservation.Response): the facts of Accepted known before the execution
// is routed, so that a replay answers in any front door's shape. Earlier versions kept
// the HTTP API's 202 body there, {"id","status","created_at","links"}: it decodes the
// same way.
type reservedExecution struct {
	ID        string    `json:"id"`
	CreatedAt time.Time `json:"created_at"`
}

// reservationOf is the reservation of execution id, to be created at createdAt, under
// idem's key.
func reservationOf(id string, createdAt time.Time, idem Idempotency) eventstore.Reservation {
	// Built by hand: it is on the path of every submission with a key, and the id is
	// one of ours.
	b := make([]byte, 0, 80)
	b = append(b, `{"id":`...)
	b = protocol.AppendJSONString(b, id)
	b = append(b, `,"created_at":"`...)
	b = createdAt.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `"}`...)
	return eventstore.Reservation{
		Scope:       idem.Scope,
		Fingerprint: idem.Fingerprint,
		ExecutionID: id,
		Response:    b,
		CreatedAt:   createdAt,
	}
}

// replayOf is the answer to a replay of reservation r, whose execution's status is st
// (nil when the execution has been removed).
func replayOf(r eventstore.Reservation, st *eventstore.Status) Accepted {
	acc := Accepted{ID: r.ExecutionID, CreatedAt: r.CreatedAt}
	var kept reservedExecution
	if err := json.Unmarshal(r.Response, &kept); err == nil && kept.ID == r.ExecutionID && !kept.CreatedAt.IsZero() {
		acc.CreatedAt = kept.CreatedAt
	}
	if st != nil {
		var info struct {
			DeadlineAt time.Time `json:"deadline_at"` // of Info
		}
		_ = json.Unmarshal(st.Info, &info)
		acc.DeadlineAt = info.DeadlineAt
	}
	return acc
}

// acceptedRecorded reports whether st's execution was created completely: its first
// event, execution.accepted, is recorded (see create).
func acceptedRecorded(st eventstore.Status) bool { return st.LastSequence > 0 }

// reserve claims key for mine, or finds the request that claimed it before. It returns
// replayed=false when mine is now stored (the caller creates the execution), and
// replayed=true with the earlier execution when the same request was made before; a
// different request with the same key is errKeyReused. A new key beyond the scope's
// limit of reservations is errTooManyKeys: the store counts them, in mine.Scope.
//
// A reservation naming mine's own execution is mine: an earlier try of this Reserve
// stored it and its answer was lost. An earlier request's reservation is replayed once
// its execution exists — recorded with execution.accepted — or, when the execution is
// missing, once the store marked the reservation Created: the execution was created and
// has been removed after its retention, and the key answers "whatever the execution's
// state". Otherwise its creator is between Reserve and Create (or between Create and
// execution.accepted), or was refused and is about to release the key, or died on the
// way (spec/events.md, "Ownership and orphans"). reserve polls for at most
// e.replayWait: the execution appearing makes this a replay, a release lets the next
// Reserve succeed (then this request creates the execution itself), and if neither
// happens the answer is errInProgress (conflict, retryable), never an execution that may
// never exist. A reservation older than the execution lease whose execution was never
// created is a dead creator's: it is released at once and this request creates the
// execution. (A creator that died after Create leaves an execution whose lease expires;
// a sweeping replica then records execution.accepted and its failure, and the key
// replays it.)
func (e *Engine) reserve(ctx context.Context, key string, mine eventstore.Reservation) (Accepted, bool, error) {
	var (
		waitUntil time.Time
		poll      = replayPoll
		released  bool
	)
	for {
		cur, reserved, err := e.store.Reserve(ctx, key, mine, e.idempotencyTTL, e.maxReservations)
		if full, ok := errors.AsType[*eventstore.ReservationLimitError](err); ok {
			return Accepted{}, false, errTooManyKeys(full)
		}
		if err != nil {
			e.log.Error(err, "Cannot reserve an idempotency key", "execution", mine.ExecutionID)
			return Accepted{}, false, storeError(err)
		}
		if reserved || cur.ExecutionID == mine.ExecutionID {
			return Accepted{}, false, nil
		}
		if cur.Fingerprint != mine.Fingerprint {
			return Accepted{}, false, errKeyReused()
		}
		st, err := e.store.Get(ctx, cur.ExecutionID)
		switch {
		case err == nil && acceptedRecorded(st):
			return replayOf(cur, &st), true, nil
		case err == nil:
			// Created, execution.accepted not yet recorded: wait for it.
		case errors.Is(err, eventstore.ErrNotFound):
			if cur.Created {
				return replayOf(cur, nil), true, nil
			}
			// The age compares this replica's clock with the creator's; the lease is far
			// above any submission's duration and any plausible skew between them.
			if e.now().Sub(cur.CreatedAt) > e.lease && !released {
				// Once only: should the reservation somehow survive, this waits instead.
				released = true
				if err := e.store.Release(ctx, key, cur.ExecutionID); err != nil {
					e.log.Error(err, "Cannot release a dead submission's idempotency key", "execution", cur.ExecutionID)
					return Accepted{}, false, errInternal()
				}
				continue
			}
		default:
			e.log.Error(err, "Cannot read the execution of an idempotency key", "execution", cur.ExecutionID)
			return Accepted{}, false, errInternal()
		}
		now := time.Now() // this replica's own clock only: a bound on waiting, not an age
		if waitUntil.IsZero() {
			waitUntil = now.Add(e.replayWait)
		}
		if !now.Before(waitUntil) {
			return Accepted{}, false, errInProgress()
		}
		t := time.NewTimer(min(poll, waitUntil.Sub(now)))
		select {
		case <-ctx.Done():
			t.Stop()
			return Accepted{}, false, ctx.Err()
		case <-t.C:
		}
		poll = min(2*poll, replayPollMax)
	}
}

// releaseUnlessCreated forgets key after a refused submission, so that a refused request
// is not remembered (spec/http-api.md, "Idempotency"), unless the execution exists after
// all: then the key must keep answering with it, or a retry would create a second one. It
// releases only when the store says the execution does not exist, or exists without
// execution.accepted (create gave up and it never runs). When the store cannot tell, the
// key is kept: a duplicate then waits and gets conflict rather than risk a second
// execution.
func (e *Engine) releaseUnlessCreated(ctx context.Context, key, id string) {
	pause := replayPoll
	for try := 1; ; try++ {
		st, err := e.store.Get(ctx, id)
		switch {
		case err == nil && acceptedRecorded(st):
			return
		case err == nil, errors.Is(err, eventstore.ErrNotFound):
			if err := e.store.Release(ctx, key, id); err != nil {
				e.log.Error(err, "Releasing an idempotency key failed", "execution", id)
			}
			return
		}
		if try >= releaseTries {
			e.log.Error(err, "Cannot tell whether a refused submission created its execution; keeping its idempotency key", "execution", id)
			return
		}
		time.Sleep(pause)
		pause *= 4
	}
}
