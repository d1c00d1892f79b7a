package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

const (
	// maxKeyLength bounds an idempotency key (spec/http-api.md, "Idempotency").
	maxKeyLength = 255
	// replayWait bounds how long a duplicate waits for the outcome of the request that
	// reserved its key: the execution being created (then it is replayed) or the key
	// being released (then the duplicate proceeds as if it were first). Creation takes
	// microseconds to milliseconds; a duplicate still without an outcome after this gets
	// 409 conflict, retryable, rather than a 202 for an execution that may never exist.
	replayWait = 10 * time.Second
	// replayPoll is the first interval at which a waiting duplicate checks again; it
	// doubles up to replayPollMax.
	replayPoll    = 2 * time.Millisecond
	replayPollMax = 100 * time.Millisecond
	// releaseTries bounds the reads releaseUnlessCreated makes to learn whether a
	// failed submission created its execution after all.
	releaseTries = 3
	// minKeysRetryAfter is the least retry_after_ms of errTooManyKeys, so that a
	// caller whose earliest key is about to expire does not retry in a busy loop.
	minKeysRetryAfter = time.Second
)

// errTooManyKeys answers a submission with a new key from a caller whose scope holds
// Config.MaxReservations unexpired reservations already (429, retryable). The store
// says when the earliest of them expires: a retry finds room then, if no refused
// submission of the caller's has made room before.
func errTooManyKeys(full *eventstore.ReservationLimitError) *protocol.Error {
	e := protocol.NewError(protocol.CodeRateLimited, "Idempotency-Key: too many of this caller's keys are remembered; retry later")
	wait := max(full.RetryAfter, minKeysRetryAfter)
	e.RetryAfterMs = int64((wait + time.Millisecond - 1) / time.Millisecond)
	return e
}

// idempotencyKey returns the request's Idempotency-Key and whether there is one. The
// header is either the raw key (abc) or an RFC 8941 sf-string ("abc", with \" and \\ as
// the only escapes); both denote the same key. The key is 1 to 255 visible ASCII
// characters (0x21–0x7E). More than one header, an sf-string with parameters or anything
// after its closing quote, and any other value are rejected.
func idempotencyKey(h http.Header) (key string, ok bool, err error) {
	values := h.Values("Idempotency-Key")
	switch len(values) {
	case 0:
		return "", false, nil
	case 1:
	default:
		return "", false, errKeyInvalid
	}
	// RFC 8941 parsing discards surrounding spaces; net/http already trims most.
	v := strings.Trim(values[0], " \t")
	if strings.HasPrefix(v, `"`) {
		if v, ok = parseSFString(v); !ok {
			return "", false, errKeyInvalid
		}
	}
	if len(v) < 1 || len(v) > maxKeyLength {
		return "", false, errKeyInvalid
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x21 || v[i] > 0x7e {
			return "", false, errKeyInvalid
		}
	}
	return v, true, nil
}

// parseSFString parses an RFC 8941 string that must make up all of v (v starts with a
// quote). Only \" and \\ are escapes; characters must be printable ASCII.
func parseSFString(v string) (string, bool) {
	// Fast path: no escapes, so the key is a substring and costs no allocation.
	if end := strings.IndexAny(v[1:], `"\`); end >= 0 && v[1+end] == '"' {
		if 1+end != len(v)-1 {
			return "", false
		}
		s := v[1 : 1+end]
		for i := 0; i < len(s); i++ {
			if s[i] < 0x20 || s[i] > 0x7e {
				return "", false
			}
		}
		return s, true
	}
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '\\':
			i++
			if i == len(v) || (v[i] != '"' && v[i] != '\\') {
				return "", false
			}
			b.WriteByte(v[i])
		case c == '"':
			return b.String(), i == len(v)-1
		case c < 0x20 || c > 0x7e:
			return "", false
		default:
			b.WriteByte(c)
		}
	}
	return "", false // no closing quote
}

// idempotencyScope is the scope a request's keys live in (spec/http-api.md,
// "Idempotency"): the caller principal when authentication is on, else the runtime. A
// principal with a uid is scoped by it too, so that a ServiceAccount created again under
// a deleted one's name does not replay, and learn, its predecessor's executions.
func (s *server) idempotencyScope(r *http.Request) string {
	if s.auth == nil {
		return "runtime"
	}
	p := principal(r.Context())
	if p.UID != "" {
		return "principal-uid:" + p.UID + "/" + p.Name
	}
	return "principal:" + p.Name
}

// scopedKey is the store key of key in scope. Keys never contain a space, so the first
// space separates the two whatever a principal's name holds.
func scopedKey(scope, key string) string { return scope + " " + key }

// reserve claims key for mine, or finds the request that claimed it before. It returns
// replay=false when mine is now stored (the caller creates the execution), and
// replay=true with the earlier reservation when the same request was made before; a
// different request with the same key is errKeyReused. A new key beyond the caller's
// limit of reservations is errTooManyKeys: the store counts them, in mine.Scope.
//
// A reservation naming mine's own execution is mine: an earlier try of this Reserve
// stored it and its answer was lost. An earlier request's reservation is replayed once
// its execution exists — recorded with execution.accepted — or, when the execution is
// missing, once the store marked the reservation Created: the execution was created and
// has been removed after its retention, and the key answers "whatever the execution's
// state". Otherwise its creator is between Reserve and Create (or between Create and
// execution.accepted), or was rejected and is about to release the key, or died on the
// way (spec/events.md, "Ownership and orphans"). reserve polls for at most s.replayWait:
// the execution appearing makes this a replay, a release lets the next Reserve succeed
// (then this request creates the execution itself), and if neither happens the answer
// is errInProgress (409, retryable), never a 202 for an execution that may never exist.
// A reservation older than the execution lease whose execution was never created is a
// dead creator's: it is released at once and this request creates the execution. (A
// creator that died after Create leaves an execution whose lease expires; a sweeping
// replica then records execution.accepted and its failure, and the key replays it.)
func (s *server) reserve(ctx context.Context, key string, mine eventstore.Reservation) (r eventstore.Reservation, replay bool, err error) {
	var (
		waitUntil time.Time
		poll      = replayPoll
		released  bool
	)
	for {
		cur, reserved, err := s.store.Reserve(ctx, key, mine, s.idempotencyTTL, s.maxReservations)
		if full, ok := errors.AsType[*eventstore.ReservationLimitError](err); ok {
			return eventstore.Reservation{}, false, errTooManyKeys(full)
		}
		if err != nil {
			return eventstore.Reservation{}, false, err
		}
		if reserved || cur.ExecutionID == mine.ExecutionID {
			return mine, false, nil
		}
		if cur.Fingerprint != mine.Fingerprint {
			return eventstore.Reservation{}, false, errKeyReused
		}
		st, err := s.store.Get(ctx, cur.ExecutionID)
		switch {
		case err == nil && st.LastSequence > 0:
			return cur, true, nil
		case err == nil:
			// Created, execution.accepted not yet recorded: wait for it.
		case errors.Is(err, eventstore.ErrNotFound):
			if cur.Created {
				return cur, true, nil
			}
			// The age compares this replica's clock with the creator's; the lease is far
			// above any submission's duration and any plausible skew between them.
			if s.now().Sub(cur.CreatedAt) > s.lease && !released {
				// Once only: should the reservation somehow survive, this waits instead.
				released = true
				if err := s.store.Release(ctx, key, cur.ExecutionID); err != nil {
					return eventstore.Reservation{}, false, err
				}
				continue
			}
		default:
			return eventstore.Reservation{}, false, err
		}
		now := time.Now() // this replica's own clock only: a bound on waiting, not an age
		if waitUntil.IsZero() {
			waitUntil = now.Add(s.replayWait)
		}
		if !now.Before(waitUntil) {
			return eventstore.Reservation{}, false, errInProgress
		}
		t := time.NewTimer(min(poll, waitUntil.Sub(now)))
		select {
		case <-ctx.Done():
			t.Stop()
			return eventstore.Reservation{}, false, ctx.Err()
		case <-t.C:
		}
		poll = min(2*poll, replayPollMax)
	}
}

// releaseUnlessCreated forgets key after a failed submission, so that a rejected request
// is not remembered (spec/http-api.md, "Idempotency"), unless the execution exists after
// all: then the key must keep answering with it, or a retry would create a second one. It
// releases only when the store says the execution does not exist, or exists without
// execution.accepted (the engine gave up creating it and never runs it). When the store
// cannot tell, the key is kept: a duplicate then waits and gets 409 rather than risk a
// second execution.
func (s *server) releaseUnlessCreated(ctx context.Context, key, id string) {
	pause := replayPoll
	for try := 1; ; try++ {
		st, err := s.store.Get(ctx, id)
		switch {
		case err == nil && st.LastSequence > 0:
			return
		case err == nil, errors.Is(err, eventstore.ErrNotFound):
			if err := s.store.Release(ctx, key, id); err != nil {
				s.log.Error(err, "Releasing an idempotency key failed", "execution", id)
			}
			return
		}
		if try >= releaseTries {
			s.log.Error(err, "Cannot tell whether a failed submission created its execution; keeping its idempotency key", "execution", id)
			return
		}
		time.Sleep(pause)
		pause *= 4
	}
}
