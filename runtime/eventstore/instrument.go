package eventstore

import (
	"context"
	"encoding/json"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// Op names a timed store operation (spec/observability.md, "Metrics"). Wait and
// WaitCancel block until something happens, so their time says nothing about the store
// and they are not timed.
type Op int

// The timed operations, one per method of the roles but Wait and WaitCancel.
const (
	OpCreate Op = iota
	OpAppend
	OpGet
	OpSnapshot
	OpRead
	OpReserve
	OpRelease
	OpRequestCancel
	OpAcquire
	OpRenew
	OpReleaseLease
	OpOrphans
	OpSetRemote
	OpSecret
	OpRemove
	OpHold
	OpSettle
	OpPending
	OpCounters
	numOps
)

var opNames = [numOps]string{
	OpCreate: "create", OpAppend: "append", OpGet: "get", OpSnapshot: "snapshot",
	OpRead: "read", OpReserve: "reserve", OpRelease: "release",
	OpRequestCancel: "request_cancel", OpAcquire: "acquire", OpRenew: "renew",
	OpReleaseLease: "release_lease", OpOrphans: "orphans", OpSetRemote: "set_remote",
	OpSecret: "secret", OpRemove: "remove", OpHold: "hold", OpSettle: "settle",
	OpPending: "pending", OpCounters: "counters",
}

// String is the operation's metric label.
func (o Op) String() string { return opNames[o] }

// Ops returns every timed operation.
func Ops() []Op {
	ops := make([]Op, numOps)
	for i := range ops {
		ops[i] = Op(i)
	}
	return ops
}

// Timer receives the duration of each timed operation, failed ones included. It must
// be cheap and safe for concurrent use.
type Timer func(op Op, d time.Duration)

// The Instrument functions return a role with every operation but Wait and WaitCancel
// timed by timer. They only measure: every call and result passes through unchanged.
// Announced is never timed (it never calls the backend), so an Announcer is used as it
// is.

// InstrumentLog times Create, Append, Get, Snapshot, Read and Remove.
func InstrumentLog(l Log, timer Timer) Log { return timedLog{l, timer} }

// InstrumentReservations times Reserve and Release.
func InstrumentReservations(r Reservations, timer Timer) Reservations {
	return timedReservations{r, timer}
}

// InstrumentCancels times RequestCancel.
func InstrumentCancels(c Cancels, timer Timer) Cancels { return timedCancels{c, timer} }

// InstrumentLeases times Acquire, Renew, ReleaseLease, Orphans and SetRemote.
func InstrumentLeases(l Leases, timer Timer) Leases { return timedLeases{l, timer} }

// InstrumentSecrets times Secret.
func InstrumentSecrets(s Secrets, timer Timer) Secrets { return timedSecrets{s, timer} }

// InstrumentBudgets times Hold, Settle, Pending and Counters.
func InstrumentBudgets(b Budgets, timer Timer) Budgets { return timedBudgets{b, timer} }

// since reports op's duration from start; deferred as since(timer, op, time.Now()), so
// that start is taken when the call begins.
func since(timer Timer, op Op, start time.Time) { timer(op, time.Since(start)) }

type timedLog struct {
	l     Log
	timer Timer
}

func (t timedLog) Create(ctx context.Context, rec Record, owner string, ttl time.Duration) (Lease, error) {
	defer since(t.timer, OpCreate, time.Now())
	return t.l.Create(ctx, rec, owner, ttl)
}

func (t timedLog) Append(ctx context.Context, fence Fence, ev protocol.Event) error {
	defer since(t.timer, OpAppend, time.Now())
	return t.l.Append(ctx, fence, ev)
}

func (t timedLog) Get(ctx context.Context, id string) (Status, error) {
	defer since(t.timer, OpGet, time.Now())
	return t.l.Get(ctx, id)
}

func (t timedLog) Snapshot(ctx context.Context, id string) (protocol.Snapshot, error) {
	defer since(t.timer, OpSnapshot, time.Now())
	return t.l.Snapshot(ctx, id)
}

func (t timedLog) Read(ctx context.Context, id string, after uint64, limit int) ([]protocol.Event, error) {
	defer since(t.timer, OpRead, time.Now())
	return t.l.Read(ctx, id, after, limit)
}

func (t timedLog) Remove(ctx context.Context, id string) error {
	defer since(t.timer, OpRemove, time.Now())
	return t.l.Remove(ctx, id)
}

func (t timedLog) Wait(ctx context.Context, id string, after uint64) error {
	return t.l.Wait(ctx, id, after)
}

type timedReservations struct {
	r     Reservations
	timer Timer
}

func (t timedReservations) Reserve(ctx context.Context, key string, r Reservation, ttl time.Duration, limit int) (Reservation, bool, error) {
	defer since(t.timer, OpReserve, time.Now())
	return t.r.Reserve(ctx, key, r, ttl, limit)
}

func (t timedReservations) Release(ctx context.Context, key, executionID string) error {
	defer since(t.timer, OpRelease, time.Now())
	return t.r.Release(ctx, key, executionID)
}

type timedCancels struct {
	c     Cancels
	timer Timer
}

func (t timedCancels) RequestCancel(ctx context.Context, id string) error {
	defer since(t.timer, OpRequestCancel, time.Now())
	return t.c.RequestCancel(ctx, id)
}

func (t timedCancels) WaitCancel(ctx context.Context, id string) error {
	return t.c.WaitCancel(ctx, id)
}

type timedLeases struct {
	l     Leases
	timer Timer
}

func (t timedLeases) Acquire(ctx context.Context, id, owner string, ttl time.Duration) (Lease, error) {
	defer since(t.timer, OpAcquire, time.Now())
	return t.l.Acquire(ctx, id, owner, ttl)
}

func (t timedLeases) Renew(ctx context.Context, id string, fence Fence, ttl time.Duration) (Lease, error) {
	defer since(t.timer, OpRenew, time.Now())
	return t.l.Renew(ctx, id, fence, ttl)
}

func (t timedLeases) ReleaseLease(ctx context.Context, id string, fence Fence) error {
	defer since(t.timer, OpReleaseLease, time.Now())
	return t.l.ReleaseLease(ctx, id, fence)
}

func (t timedLeases) Orphans(ctx context.Context, limit int) ([]string, error) {
	defer since(t.timer, OpOrphans, time.Now())
	return t.l.Orphans(ctx, limit)
}

func (t timedLeases) SetRemote(ctx context.Context, id string, fence Fence, handle json.RawMessage) error {
	defer since(t.timer, OpSetRemote, time.Now())
	return t.l.SetRemote(ctx, id, fence, handle)
}

type timedSecrets struct {
	s     Secrets
	timer Timer
}

func (t timedSecrets) Secret(ctx context.Context, name string, candidate []byte, ttl time.Duration) ([]byte, error) {
	defer since(t.timer, OpSecret, time.Now())
	return t.s.Secret(ctx, name, candidate, ttl)
}

type timedBudgets struct {
	b     Budgets
	timer Timer
}

func (t timedBudgets) Hold(ctx context.Context, id string, holds []Hold, note json.RawMessage) error {
	defer since(t.timer, OpHold, time.Now())
	return t.b.Hold(ctx, id, holds, note)
}

func (t timedBudgets) Settle(ctx context.Context, id string, spent map[string]int64) (bool, error) {
	defer since(t.timer, OpSettle, time.Now())
	return t.b.Settle(ctx, id, spent)
}

func (t timedBudgets) Pending(ctx context.Context, before time.Time, limit int) ([]PendingHold, error) {
	defer since(t.timer, OpPending, time.Now())
	return t.b.Pending(ctx, before, limit)
}

func (t timedBudgets) Counters(ctx context.Context, names []string) ([]int64, error) {
	defer since(t.timer, OpCounters, time.Now())
	return t.b.Counters(ctx, names)
}
