package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
)

const (
	// maxKeyLength bounds an idempotency key (CONTRACT §4.1).
	maxKeyLength = 255
	// replayWait bounds how long a replay waits for the execution of a reservation whose
	// creator has reserved the key but not yet created the execution. Creation takes
	// microseconds to milliseconds, so a reservation older than this whose execution is
	// missing belongs to an execution removed after its retention: it is replayed at once.
	replayWait = 2 * time.Second
	// replayPoll is the first interval at which a waiting replay checks again; it doubles
	// up to replayPollMax.
	replayPoll    = 2 * time.Millisecond
	replayPollMax = 50 * time.Millisecond
)

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

// idempotencyScope is the scope a request's keys live in (CONTRACT §4.1): the caller
// principal when authentication is on, else the runtime. There is no authentication
// yet, so every key is in the runtime's scope; this is the one place to change.
func idempotencyScope(*http.Request) string { return "runtime" }

// scopedKey is the store key of key in scope. Keys never contain a space, so the first
// space separates the two whatever a principal's name holds.
func scopedKey(scope, key string) string { return scope + " " + key }

// reserve claims key for mine, or finds the request that claimed it before. It returns
// replay=false when mine is now stored (the caller creates the execution), and
// replay=true with the earlier reservation when the same request was made before; a
// different request with the same key is errKeyReused.
//
// The earlier reservation's execution normally exists. When it does not, either its
// creator is still between Reserve and Create, or the creator was rejected and is about
// to Release the key, or the execution has been removed after its retention. So reserve
// polls for a short while: the execution appearing makes this a replay, a release lets
// the next Reserve succeed (then this request creates the execution itself), and a
// reservation too old to be in progress is replayed as it is — "whatever the execution's
// state".
func (s *server) reserve(ctx context.Context, key string, mine eventstore.Reservation) (r eventstore.Reservation, replay bool, err error) {
	var (
		waitUntil time.Time
		poll      = replayPoll
	)
	for {
		cur, reserved, err := s.store.Reserve(ctx, key, mine, s.idempotencyTTL)
		if err != nil {
			return eventstore.Reservation{}, false, err
		}
		if reserved {
			return cur, false, nil
		}
		if cur.Fingerprint != mine.Fingerprint {
			return eventstore.Reservation{}, false, errKeyReused
		}
		_, err = s.store.Get(ctx, cur.ExecutionID)
		if err == nil {
			return cur, true, nil
		}
		if !errors.Is(err, eventstore.ErrNotFound) {
			return eventstore.Reservation{}, false, err
		}
		now := time.Now()
		if waitUntil.IsZero() {
			waitUntil = now.Add(replayWait)
		}
		if now.After(waitUntil) || s.now().Sub(cur.CreatedAt) > replayWait {
			return cur, true, nil
		}
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return eventstore.Reservation{}, false, ctx.Err()
		case <-t.C:
		}
		poll = min(2*poll, replayPollMax)
	}
}

// releaseUnlessCreated forgets key after a failed submission, so that a rejected
// request is not remembered (CONTRACT §4.1), unless the execution exists after all: then
// the key must keep answering with it, or a retry would create a second one.
func (s *server) releaseUnlessCreated(ctx context.Context, key, id string) {
	if _, err := s.store.Get(ctx, id); err == nil {
		return
	}
	if err := s.store.Release(ctx, key, id); err != nil {
		s.log.Error(err, "Releasing an idempotency key failed", "execution", id)
	}
}
