package redis

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
)

// Leases (spec/events.md, "Ownership and orphans").
//
// An execution's lease is three fields of its meta hash, checked and changed by the
// scripts atomically with the writes they guard (see scripts.go). Finding orphans needs
// an index of leases by expiry across all executions: the sorted set <prefix>leases,
// member the execution id, score the lease expiry in ms on the Redis clock. It cannot
// be written by the scripts, which touch the keys of one execution's cluster slot only,
// so it is a hint kept up to date around them, and every way it can be wrong heals:
//
//   - Create files a leased execution before its script runs (ahead of it in one
//     pipeline), with an expiry estimated on this replica's clock (unless an entry
//     exists: a repeated Create leaves it), and again after with the real one if the
//     two differ by more than indexTolerance (clocks apart). So a leased execution is
//     never missing from the index, even if its creator dies between the two steps; an
//     entry for an execution that was never created is removed by the first Orphans or
//     Acquire that finds it missing.
//   - Acquire and Renew file the new expiry after their script. If that step is lost,
//     the entry keeps the earlier score: a sweeper lists the execution too early, its
//     Acquire answers ErrLeaseHeld with the real expiry, and the entry is scored again
//     (only raised, ZADD XX GT, so that it never undoes a newer update).
//   - ReleaseLease files the release time after its script; if that is lost, the orphan
//     is found at its old expiry instead of at once.
//   - A terminal append removes the entry after its script; if that is lost, the next
//     Orphans (or Acquire) that finds the execution terminal removes it.
//
// Orphans reads the due entries (ZRANGEBYSCORE up to the Redis TIME) and checks each
// against its meta hash in one pipelined round trip, dropping and repairing stale ones
// as above, so it costs O(log n + limit) and lists only executions that were orphans
// when it looked. Acquire still decides: the list is a hint by contract.

// indexTolerance is how far the expiry Create estimated may be from the lease's, on the
// Redis clock, before the entry is filed again: a sweeper then finds the orphan at most
// that early (and Acquire refuses and rescores it) or that late, which a lease of
// seconds makes no difference to.
const indexTolerance = time.Second

// Acquire implements eventstore.Leases.
func (s *Store) Acquire(ctx context.Context, id, owner string, ttl time.Duration) (eventstore.Lease, error) {
	if err := eventstore.CheckAcquire(id, owner, ttl); err != nil {
		return eventstore.Lease{}, err
	}
	if s.isClosed.Load() {
		return eventstore.Lease{}, eventstore.ErrClosed
	}
	// The token tells a second run of this call's script from another Acquire.
	reply, err := acquireScript.Run(ctx, s.client, []string{s.metaKey(id)}, owner, millis(ttl), rand.Text()).Slice()
	if err != nil {
		return eventstore.Lease{}, s.fail(err, "acquire lease of %s", id)
	}
	switch code, _ := reply[0].(int64); code {
	case -1:
		s.unindex(ctx, id)
		return eventstore.Lease{}, notFound(id)
	case -2:
		s.unindex(ctx, id)
		return eventstore.Lease{}, fmt.Errorf("acquire lease of %s: %w", id, eventstore.ErrTerminated)
	case -3:
		held, err := decodeLease([]any{reply[1], nil, reply[2]})
		if err != nil {
			return eventstore.Lease{}, fmt.Errorf("acquire lease of %s: %w", id, err)
		}
		s.rescore(ctx, id, held.Expires)
		return eventstore.Lease{}, fmt.Errorf("acquire lease of %s: held by %s until %v: %w",
			id, held.Owner, held.Expires, eventstore.ErrLeaseHeld)
	}
	lease, err := decodeLease(reply[1:])
	if err != nil {
		return eventstore.Lease{}, fmt.Errorf("acquire lease of %s: %w", id, err)
	}
	s.index(ctx, id, lease.Expires)
	return lease, nil
}

// Renew implements eventstore.Leases. NoFence names no lease: ErrInvalid.
func (s *Store) Renew(ctx context.Context, id string, fence eventstore.Fence, ttl time.Duration) (eventstore.Lease, error) {
	if err := eventstore.CheckRenew(id, fence, ttl); err != nil {
		return eventstore.Lease{}, err
	}
	if s.isClosed.Load() {
		return eventstore.Lease{}, eventstore.ErrClosed
	}
	reply, err := renewScript.Run(ctx, s.client, []string{s.metaKey(id)}, formatFence(fence), millis(ttl)).Slice()
	if err != nil {
		return eventstore.Lease{}, s.fail(err, "renew lease of %s", id)
	}
	if err := s.leaseError(ctx, reply, "renew lease of", id, fence); err != nil {
		return eventstore.Lease{}, err
	}
	lease, err := decodeLease(reply[1:])
	if err != nil {
		return eventstore.Lease{}, fmt.Errorf("renew lease of %s: %w", id, err)
	}
	s.index(ctx, id, lease.Expires)
	return lease, nil
}

// ReleaseLease implements eventstore.Leases. NoFence names no lease: ErrInvalid.
func (s *Store) ReleaseLease(ctx context.Context, id string, fence eventstore.Fence) error {
	if err := eventstore.CheckReleaseLease(id, fence); err != nil {
		return err
	}
	if s.isClosed.Load() {
		return eventstore.ErrClosed
	}
	reply, err := releaseLeaseScript.Run(ctx, s.client, []string{s.metaKey(id)}, formatFence(fence)).Slice()
	if err != nil {
		return s.fail(err, "release lease of %s", id)
	}
	if err := s.leaseError(ctx, reply, "release lease of", id, fence); errors.Is(err, eventstore.ErrTerminated) {
		return nil // the lease ended with the execution
	} else if err != nil {
		return err
	}
	expires, err := replyMillis(reply[1])
	if err != nil {
		return fmt.Errorf("release lease of %s: %w", id, err)
	}
	s.index(ctx, id, expires)
	return nil
}

// SetRemote implements eventstore.Leases.
func (s *Store) SetRemote(ctx context.Context, id string, fence eventstore.Fence, handle json.RawMessage) error {
	if s.isClosed.Load() {
		return eventstore.ErrClosed
	}
	args := []any{formatFence(fence)}
	if handle != nil {
		args = append(args, []byte(handle))
	}
	code, err := setRemoteScript.Run(ctx, s.client, []string{s.metaKey(id)}, args...).Int64()
	switch {
	case err != nil:
		return s.fail(err, "set remote of %s", id)
	case code == -1:
		return notFound(id)
	case code == -4:
		return fmt.Errorf("set remote of %s: fence %d is not current: %w", id, fence, eventstore.ErrLeaseLost)
	case code == -2:
		return fmt.Errorf("set remote of %s: %w", id, eventstore.ErrTerminated)
	}
	return nil
}

// Orphans implements eventstore.Leases.
func (s *Store) Orphans(ctx context.Context, limit int) ([]string, error) {
	if s.isClosed.Load() {
		return nil, eventstore.ErrClosed
	}
	limit = eventstore.OrphanLimit(limit)
	reply, err := orphansScript.Run(ctx, s.client, []string{s.leasesKey()}, limit).Slice()
	if err != nil {
		return nil, s.fail(err, "list orphans")
	}
	now, err := replyMillis(reply[0])
	due, _ := reply[1].([]any)
	if err != nil || len(due) == 0 {
		return nil, err
	}

	pipe := s.client.Pipeline()
	states := make([]*goredis.SliceCmd, len(due))
	for i, m := range due {
		id, _ := m.(string)
		states[i] = pipe.HMGet(ctx, s.metaKey(id), "last_sequence", "terminal", "lease_expires")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, s.fail(err, "list orphans")
	}
	ids := make([]string, 0, len(due))
	fix := s.client.Pipeline()
	for i, m := range due {
		id, _ := m.(string)
		vals := states[i].Val()
		expires, err := replyMillis(vals[2])
		switch {
		case vals[0] == nil || vals[1] != nil || vals[2] == nil: // gone, ended or never leased
			fix.ZRem(ctx, s.leasesKey(), id)
		case err == nil && expires.After(now): // renewed or acquired since it was filed
			fix.ZAddArgs(ctx, s.leasesKey(), rescoreArgs(id, expires))
		default:
			ids = append(ids, id)
		}
	}
	if fix.Len() > 0 {
		_, _ = fix.Exec(context.WithoutCancel(ctx)) // a hint: a failure only leaves it stale
	}
	return ids, nil
}

// leaseError turns the error codes of renewScript and releaseLeaseScript into errors,
// taking a missing or terminal execution out of the orphan index; nil for success.
func (s *Store) leaseError(ctx context.Context, reply []any, op, id string, fence eventstore.Fence) error {
	switch code, _ := reply[0].(int64); code {
	case -1:
		s.unindex(ctx, id)
		return notFound(id)
	case -2:
		s.unindex(ctx, id)
		return fmt.Errorf("%s %s: %w", op, id, eventstore.ErrTerminated)
	case -4:
		return fmt.Errorf("%s %s: fence %d, current is %v: %w", op, id, fence, reply[1], eventstore.ErrLeaseLost)
	}
	return nil
}

// The orphan index's updates after a script has written. They are hints (see above):
// an error leaves a stale entry that heals, so it is not reported, and a context that
// ended after the script ran does not stop them.

// index files id in the orphan index under expires.
func (s *Store) index(ctx context.Context, id string, expires time.Time) {
	s.client.ZAdd(context.WithoutCancel(ctx), s.leasesKey(), goredis.Z{Score: float64(expires.UnixMilli()), Member: id})
}

// rescore raises id's score to expires if id is still filed and scored earlier.
func (s *Store) rescore(ctx context.Context, id string, expires time.Time) {
	s.client.ZAddArgs(context.WithoutCancel(ctx), s.leasesKey(), rescoreArgs(id, expires))
}

// unindex takes id out of the orphan index.
func (s *Store) unindex(ctx context.Context, id string) {
	s.client.ZRem(context.WithoutCancel(ctx), s.leasesKey(), id)
}

func rescoreArgs(id string, expires time.Time) goredis.ZAddArgs {
	return goredis.ZAddArgs{XX: true, GT: true, Members: []goredis.Z{{Score: float64(expires.UnixMilli()), Member: id}}}
}

// decodeLease reads a lease from script or HMGET reply values: owner, fence and expiry
// in ms since the epoch. Missing values (nil, "" or "0") are those of a zero Lease.
func decodeLease(vals []any) (eventstore.Lease, error) {
	if len(vals) != 3 {
		return eventstore.Lease{}, fmt.Errorf("lease: %w", errCorrupt)
	}
	var l eventstore.Lease
	l.Owner, _ = vals[0].(string)
	if fence, ok := vals[1].(string); ok && fence != "" {
		f, err := strconv.ParseUint(fence, 10, 64)
		if err != nil {
			return eventstore.Lease{}, fmt.Errorf("lease fence: %w", err)
		}
		l.Fence = eventstore.Fence(f)
	}
	var err error
	l.Expires, err = replyMillis(vals[2])
	return l, err
}

// replyMillis reads a time in ms since the epoch from a reply value; nil, "" and "0"
// are the zero time.
func replyMillis(v any) (time.Time, error) {
	s, _ := v.(string)
	if s == "" || s == "0" {
		return time.Time{}, nil
	}
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("time in ms: %w", err)
	}
	return time.UnixMilli(ms), nil
}
