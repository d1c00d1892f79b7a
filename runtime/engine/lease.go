package engine

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
	"github.com/switchboard-dev/switchboard/runtime/telemetry/lazylog"
)

// Ownership of executions across replicas (spec/events.md, "Ownership and orphans").
//
// The replica that runs an execution holds its lease in the store and renews it every
// third of the lease's length (keepLease). Every write carries the lease's fence, so a
// replica that stopped renewing in time — a long pause, a partition — has its next
// write refused and stops (writer.lost) instead of writing next to the replica that
// took over.
//
// Every replica sweeps the store for orphans: executions whose lease expired because
// their replica died, or was released by a replica shutting down. The first replica to
// acquire an orphan's lease (an atomic step in the store, so exactly one does) ends it:
// cancelled or deadline_exceeded when that was due, internal otherwise — or, when its
// last attempt left a remote job behind (Emitter.RemoteJob) and the adapter can resume
// it (Resumer), adopts the execution and runs that attempt to its end.

// DefaultLease is the default of --execution-lease.
const DefaultLease = 15 * time.Second

// orphanBatch is how many orphans one sweep asks the store for at a time.
const orphanBatch = 100

// remoteJob is what the engine records with the store's SetRemote: the adapter's handle
// and the attempt it belongs to.
type remoteJob struct {
	Attempt    int             `json:"attempt"`
	Deployment string          `json:"deployment"`
	Handle     json.RawMessage `json:"handle"`
}

// errOrphaned is the terminal error of an execution whose replica stopped while it ran
// and whose work cannot be resumed.
func errOrphaned() *protocol.Error {
	return protocol.NewError(protocol.CodeInternal, "the runtime replica running this execution stopped")
}

// keepLease renews x's lease every third of its length until ctx ends. When the store
// says another replica holds the lease now, it ends the execution with errLeaseLost. A
// failed renewal is tried again at the next period: the lease outlives two failures.
//
// The renewals run on a timer rather than on a goroutine of their own: most executions
// end before their first renewal, and then cost no goroutine and no wake-up for it.
func (e *Engine) keepLease(ctx context.Context, x *execution, end context.CancelCauseFunc) {
	period := e.lease / 3
	var (
		mu      sync.Mutex
		stopped bool
		t       *time.Timer
	)
	renew := func() {
		_, err := e.store.Renew(ctx, x.id, x.w.fence, e.lease)
		switch {
		case err == nil:
		case errors.Is(err, eventstore.ErrLeaseLost):
			x.log.Info("Another replica took the execution over; stopping it here")
			end(errLeaseLost)
			return
		case ctx.Err() != nil, errors.Is(err, eventstore.ErrTerminated),
			errors.Is(err, eventstore.ErrNotFound), errors.Is(err, eventstore.ErrClosed):
			return
		default:
			x.log.Error(err, "Cannot renew the execution's lease; retrying at the next renewal")
		}
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			t.Reset(period)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	t = time.AfterFunc(period, renew)
	context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		t.Stop()
	})
}

// sweep looks for orphans until ctx ends: every third of the lease's length, and at least
// once per cleanup grace, so that an orphan ends within a lease and a cleanup grace of its
// replica's last renewal (spec/events.md, "Ownership and orphans").
func (e *Engine) sweep(ctx context.Context) {
	t := time.NewTicker(min(e.lease/3, e.grace))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		e.Sweep(ctx)
	}
}

// Sweep takes over the orphans the store lists now and returns how many this replica
// took over; the engine calls it periodically. Each is ended or adopted (see above).
func (e *Engine) Sweep(ctx context.Context) int {
	taken := 0
	for ctx.Err() == nil {
		ids, err := e.store.Orphans(ctx, orphanBatch)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, eventstore.ErrClosed) {
				e.log.Error(err, "Cannot list orphaned executions")
			}
			return taken
		}
		progress := false
		for _, id := range ids {
			if e.takeOver(ctx, id) {
				taken++
				progress = true
			}
		}
		// A full batch may have more behind it; a batch in which nothing could be taken
		// (others took them, or this replica has no free slot) is left for the next sweep.
		if len(ids) < orphanBatch || !progress {
			return taken
		}
	}
	return taken
}

// takeOver acquires the lease of orphan id and ends or adopts it. It reports whether
// this replica took the execution over.
func (e *Engine) takeOver(ctx context.Context, id string) bool {
	if e.closing.Load() {
		return false
	}
	lease, err := e.store.Acquire(ctx, id, e.replica, e.lease)
	switch {
	case err == nil:
	case errors.Is(err, eventstore.ErrLeaseHeld), errors.Is(err, eventstore.ErrTerminated),
		errors.Is(err, eventstore.ErrNotFound), errors.Is(err, eventstore.ErrClosed), ctx.Err() != nil:
		return false // renewed, taken by another replica, ended, removed: nothing to do
	default:
		e.log.Error(err, "Cannot acquire an orphaned execution's lease", "execution", id)
		return false
	}
	log := lazylog.WithValues(e.log, "execution", id, "fence", lease.Fence)
	// From here on the execution is this replica's: the previous owner's writes are
	// refused. Whatever happens it must end, so the store calls do not end with ctx.
	wctx := context.WithoutCancel(ctx)
	letGo := func() {
		if err := e.store.ReleaseLease(wctx, id, lease.Fence); err != nil && !errors.Is(err, eventstore.ErrLeaseLost) {
			log.Error(err, "Cannot release an orphan's lease; another replica takes it when it expires")
		}
	}
	st, err := e.store.Get(wctx, id)
	if err != nil {
		log.Error(err, "Cannot read an orphaned execution; leaving it to the next sweep")
		letGo()
		return false
	}
	var info Info
	if err := json.Unmarshal(st.Info, &info); err != nil {
		log.Error(err, "Orphaned execution has unreadable info")
	}
	x := &execution{
		id:              id,
		ability:         info.Ability,
		deadlineAt:      info.DeadlineAt,
		cancelRequested: st.CancelRequested,
		w:               writer{store: e.store, ctx: wctx, id: id, now: e.now, fence: lease.Fence, limits: e.limits},
		log:             log,
	}
	// Catch up with what the previous owner recorded (sequence, timestamp, output) from
	// the status: its events, which may be the output limit's worth, are not read.
	x.w.mu.Lock()
	x.w.catchUpLocked(st)
	x.w.mu.Unlock()
	if x.w.seq == 0 {
		// Its replica stopped between creating it and recording execution.accepted:
		// record it, so that the execution's log starts as every log does.
		accepted := protocol.AcceptedData{Ability: info.Ability, DeadlineAt: info.DeadlineAt}
		if err := x.w.appendRetry(protocol.EventAccepted, accepted, st.CreatedAt, retryPolicy{tries: acceptedTries}, log); err != nil {
			log.Error(err, "Cannot record execution.accepted of an orphan; leaving it to the next sweep")
			letGo()
			return false
		}
	}

	if job, d, ok := e.resumable(st, log); ok {
		select {
		case e.slots <- struct{}{}:
		default:
			// No room here for another running execution: a peer, or a later sweep,
			// adopts it.
			letGo()
			return false
		}
		log.Info("Adopting an orphaned execution's remote job", "attempt", job.Attempt, "deployment", job.Deployment)
		e.obs.OrphanRecovered(OrphanAdopted)
		go e.run(wctx, x, func(ctx context.Context, x *execution) (protocol.EventType, any) {
			return e.resume(ctx, x, job, d)
		})
		return true
	}

	var pe *protocol.Error
	switch {
	case st.CancelRequested:
		pe = errCancelled()
	case !e.now().Before(x.deadlineAt):
		pe = errDeadlineExceeded()
	default:
		pe = errOrphaned()
	}
	log.Info("Ending an orphaned execution", "code", pe.Code)
	typ, data := e.failed(x, pe)
	if err := x.w.appendRetry(typ, data, time.Time{}, retryPolicy{until: time.Now().Add(e.grace)}, log); err != nil {
		log.Error(err, "Cannot record an orphan's terminal event; leaving it to the next sweep")
		letGo()
		return false
	}
	e.obs.OrphanRecovered(string(pe.Code))
	e.obs.ExecutionEnded(x.ability, pe.Code)
	return true
}

// resumable returns the remote job of st's last attempt and its deployment when this
// replica can resume it: the adapter of the deployment's provider implements Resumer
// and the deployment is still in the routing table (its endpoint and credential are
// needed to follow the job).
func (e *Engine) resumable(st eventstore.Status, log logr.Logger) (remoteJob, *routing.Deployment, bool) {
	if len(st.Remote) == 0 {
		return remoteJob{}, nil, false
	}
	var job remoteJob
	if err := json.Unmarshal(st.Remote, &job); err != nil || job.Attempt != st.Attempts || len(job.Handle) == 0 {
		return remoteJob{}, nil, false // not the last attempt's: that one ended before it
	}
	ref, ok := routing.ParseRef(job.Deployment)
	if !ok {
		return remoteJob{}, nil, false
	}
	d, ok := e.table.Load().Get(ref)
	if !ok {
		log.Info("Cannot adopt a remote job: its deployment is no longer in the routing table", "deployment", job.Deployment)
		return remoteJob{}, nil, false
	}
	p, ok := e.providers[d.Provider]
	if !ok || p.New == nil {
		return remoteJob{}, nil, false
	}
	ad, err := p.New(d)
	if err != nil {
		return remoteJob{}, nil, false
	}
	if _, ok := ad.(Resumer); !ok {
		return remoteJob{}, nil, false
	}
	return job, d, true
}

// resume runs the adopted attempt job to its end and returns the execution's terminal
// event. There is no fallback after it: the request, which a fallback would send
// elsewhere, is not stored.
func (e *Engine) resume(ctx context.Context, x *execution, job remoteJob, d *routing.Deployment) (protocol.EventType, any) {
	call := func(ctx context.Context, ad Adapter, a Attempt, em Emitter) (Outcome, error) {
		r, ok := ad.(Resumer)
		if !ok {
			return Outcome{}, errNoAdapter()
		}
		return r.Resume(ctx, a, job.Handle, em)
	}
	r := e.attempt(ctx, x, job.Attempt, d, call)
	if r.err != nil {
		return e.failed(x, r.err)
	}
	return protocol.EventCompleted, protocol.CompletedData{FinishReason: r.out.FinishReason}
}
