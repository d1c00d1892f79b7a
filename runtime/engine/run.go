package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/internal/stack"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
	"github.com/switchboard-dev/switchboard/runtime/telemetry/lazylog"
)

// run drives x to its terminal event, then frees its slot. body runs its attempts (the
// candidates of its route, or an adopted attempt) and returns the terminal event.
func (e *Engine) run(parent context.Context, x *execution, body func(context.Context, *execution) (protocol.EventType, any)) {
	defer func() { <-e.slots }()
	defer e.endOf(x.principal)
	e.obs.Running(1)
	defer e.obs.Running(-1)

	// The execution keeps the submitter's values (trace ids) but not its cancellation;
	// it ends on a cancel request, when Shutdown stops it, at its deadline or when its
	// lease is lost, each with its cause.
	detached := context.WithoutCancel(parent)
	base, cancel := context.WithCancelCause(detached)
	defer cancel(nil)
	base, span := e.startExecutionSpan(base, parent, x)
	stopShutdown := context.AfterFunc(e.root, func() { cancel(context.Cause(e.root)) })
	defer stopShutdown()
	// The deadline is measured on the engine's clock and covers every attempt; it is set
	// once and never reset.
	ctx, cancelDeadline := context.WithTimeoutCause(base, x.deadlineAt.Sub(e.now()), errDeadline)
	defer cancelDeadline()

	// The lease is renewed until the terminal event is written, also while the adapter
	// cleans up after a cancel, so leaseCtx ends last.
	leaseCtx, stopLease := context.WithCancel(detached)
	defer stopLease()
	e.keepLease(leaseCtx, x, cancel)

	if x.cancelRequested {
		cancel(errCancelRequested)
	} else {
		go e.watchCancel(base, x.id, cancel)
	}

	x.w.mu.Lock()
	x.w.exceeded = func() { cancel(errOutputLimit) }
	x.w.lost = func() { cancel(errLeaseLost) }
	x.w.mu.Unlock()
	typ, data := body(ctx, x)

	// An execution this replica let go of is ended by the replica that takes it over;
	// only what succeeded before that is still recorded here (and refused by the store
	// if the lease is gone already).
	if cause := context.Cause(base); typ == protocol.EventFailed && (errors.Is(cause, errHandedOver) || errors.Is(cause, errLeaseLost)) {
		stopLease()
		if errors.Is(cause, errHandedOver) {
			if err := e.store.ReleaseLease(x.w.ctx, x.id, x.w.fence); err != nil && !errors.Is(err, eventstore.ErrLeaseLost) {
				x.log.Error(err, "Cannot release the execution's lease; another replica takes it over when it expires")
			}
			x.log.Info("Handed the execution over to another replica")
		}
		endSpan(span, "")
		return
	}
	// Without its terminal event the execution would never end for its readers, so a
	// failed write is retried, for at most the cleanup grace (which bounds how long
	// Shutdown waits). appendRetry checks whether a failed write landed before writing
	// again, so this never records a second terminal event.
	policy := retryPolicy{until: time.Now().Add(e.grace)}
	err := x.w.appendRetry(typ, data, time.Time{}, policy, x.log)
	var code protocol.Code
	if f, ok := data.(protocol.FailedData); ok && f.Error != nil {
		code = f.Error.Code
	}
	endSpan(span, code)
	// The attempts are over, so what they spent is known: it is settled even when the
	// terminal event could not be recorded (the replica that ends the execution then
	// finds nothing left to settle).
	if e.admission != nil && x.claim != nil {
		s := x.spent
		s.Failed = typ == protocol.EventFailed
		s.OutputBytes = x.w.outputBytes()
		e.admission.Settle(x.w.ctx, *x.claim, s)
	}
	if err != nil {
		x.log.Error(err, "Cannot record terminal event", "type", typ)
		return
	}
	e.obs.ExecutionEnded(x.ability, code)
}

// Bounds of the pause between WaitCancel calls after a store error.
const (
	watchPause    = 10 * time.Millisecond
	watchPauseMax = time.Second
)

// watchCancel cancels the execution when a cancel is requested on any replica. It
// returns when ctx ends, which run ensures once the terminal event is written, or when
// the store says no cancel can come (the execution is terminal or gone, the store
// closed). Any other error is transient as far as it knows: it waits again after a
// short, growing pause, so a store hiccup never leaves the execution deaf to cancels.
func (e *Engine) watchCancel(ctx context.Context, id string, cancel context.CancelCauseFunc) {
	pause := watchPause
	for {
		err := e.store.WaitCancel(ctx, id)
		switch {
		case err == nil:
			cancel(errCancelRequested)
			return
		case ctx.Err() != nil,
			errors.Is(err, eventstore.ErrTerminated),
			errors.Is(err, eventstore.ErrNotFound),
			errors.Is(err, eventstore.ErrClosed):
			return
		}
		e.log.Error(err, "Cannot watch for cancel requests; retrying", "execution", id, "pause", pause)
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		pause = min(2*pause, watchPauseMax)
	}
}

// attempts runs x's candidates in order and returns its terminal event.
func (e *Engine) attempts(ctx context.Context, x *execution) (protocol.EventType, any) {
	candidates := x.route.Candidates
	n := 0 // the attempt's number
	for i := 0; i < len(candidates); i++ {
		if n > 0 && e.admission != nil && x.claim != nil {
			// A fallback is admitted like the first attempt: a candidate whose Budgets
			// cannot take it is skipped, and with none left the execution ends.
			k, err := e.admission.Admit(ctx, *x.claim, candidates[i:])
			if err != nil {
				return e.failed(x, admissionError(err, x.log, x.id))
			}
			i += k
		}
		d := candidates[i]
		n++
		if ctx.Err() != nil {
			// Never start an attempt once the execution has ended.
			return e.failed(x, causeError(context.Cause(ctx)))
		}
		ref := d.RefString()
		sel := protocol.RouteSelectedData{Attempt: n, Deployment: ref, Provider: d.Provider, Model: d.Model}
		if err := x.w.append(protocol.EventRouteSelected, sel); err != nil {
			return e.failed(x, lifecycleError(err, x.log, "Cannot record route.selected"))
		}

		r := e.attempt(ctx, x, n, d, nil)
		x.spent = Spent{Deployment: d, Counting: e.providers[d.Provider].Counting, Usage: r.usage, Output: r.outputRecorded}
		perr := r.err
		if perr == nil {
			return protocol.EventCompleted, protocol.CompletedData{FinishReason: r.out.FinishReason}
		}
		// Fallback only for a retryable failure before any output, or a refusal before
		// anything was sent, with a candidate left and time left (spec/events.md).
		retry := (perr.Retryable || r.notSent) && !r.outputRecorded && i+1 < len(candidates)
		if retry && ctx.Err() != nil {
			// The execution ended after the attempt did: the retry the error asks for
			// cannot happen, and the reason is the end (deadline, cancel, shutdown).
			retry, perr = false, causeError(context.Cause(ctx))
		}
		if !retry {
			return e.failed(x, perr)
		}
		af := protocol.AttemptFailedData{Attempt: n, Deployment: ref, Error: settle(perr, false)}
		if err := x.w.append(protocol.EventAttemptFailed, af); err != nil {
			return e.failed(x, lifecycleError(err, x.log, "Cannot record route.attempt_failed"))
		}
		e.obs.Fallback(x.ability)
	}
	// Route guarantees at least one candidate; reaching here is a bug in it.
	x.log.Error(nil, "Route has no candidates")
	return e.failed(x, errInternal())
}

// failed is the terminal event for an execution that ends with err. It applies the
// retryable rule (settle) with what the execution has recorded: this is the one place a
// terminal failure is composed.
func (e *Engine) failed(x *execution, err *protocol.Error) (protocol.EventType, any) {
	return protocol.EventFailed, protocol.FailedData{Error: settle(err, x.w.hasOutput())}
}

// lifecycleError is the terminal error after the engine failed to record one of its own
// events: output_too_large when the event limit refused it, else internal.
func lifecycleError(err error, log logr.Logger, msg string) *protocol.Error {
	if errors.Is(err, ErrOutputTooLarge) {
		return errOutputTooLarge()
	}
	log.Error(err, msg)
	return errInternal()
}

// result is what an adapter's Execute returned.
type result struct {
	out Outcome
	err error
}

// attemptResult is how an attempt ended.
type attemptResult struct {
	// out is the adapter's outcome, when err is nil.
	out Outcome
	// err is the attempt's portable error, nil when it succeeded.
	err *protocol.Error
	// outputRecorded is true when the attempt recorded output.
	outputRecorded bool
	// usage is every usage entry the attempt reported.
	usage []protocol.Usage
	// notSent is true when the attempt failed before anything was sent to the provider:
	// the adapter could not be built, or refused the request.
	notSent bool
}

// attempt runs attempt n on deployment d: call (nil: the adapter's Execute) on the
// adapter built for d.
func (e *Engine) attempt(ctx context.Context, x *execution, n int, d *routing.Deployment, call adapterCall) attemptResult {
	ctx, span := e.startAttemptSpan(ctx, n, d)
	em := &emitter{w: &x.w, log: x.log, attempt: n, deployment: d, obs: e.obs, start: time.Now(), counting: e.providers[d.Provider].Counting}
	r := e.runAttempt(ctx, x, n, d, call, em)
	r.usage, _ = em.spent()

	if r.err != nil && Detached(ctx) {
		// Let go of, not ended: the replica that takes the execution over reports how
		// the attempt ends.
		endSpan(span, "")
		return r
	}
	var code protocol.Code
	if r.err != nil {
		code = r.err.Code
	}
	e.obs.AttemptEnded(AttemptReport{Deployment: d, Code: code, Duration: time.Since(em.start)})
	if span != nil {
		endSpan(span, code, attemptSpanAttributes(r.out, em.tokenCount())...)
	}
	return r
}

// runAttempt runs attempt n (see attempt), emitting through em.
func (e *Engine) runAttempt(ctx context.Context, x *execution, n int, d *routing.Deployment, call adapterCall, em *emitter) attemptResult {

	log := lazylog.WithValues(x.log, "attempt", n, "deployment", d.RefString(), "provider", d.Provider)
	factory := e.providers[d.Provider].New
	if factory == nil {
		log.Error(nil, "No adapter factory for provider")
		return attemptResult{err: errNoAdapter(), notSent: true}
	}
	adapter, err := factory(d)
	if err != nil {
		log.Error(err, "Cannot build adapter")
		var pe *protocol.Error
		if errors.As(err, &pe) && pe.Code.Known() {
			return attemptResult{err: pe.Clone(), notSent: true}
		}
		return attemptResult{err: errAdapterUnusable(), notSent: true}
	}

	actx, cancel := ctx, context.CancelFunc(func() {})
	if d.AttemptTimeout > 0 {
		// A child of the execution context: it can end the attempt early, never late.
		actx, cancel = context.WithTimeoutCause(ctx, d.AttemptTimeout, errAttemptTimeout)
	}
	defer cancel()
	// Adapters log through logr.FromContextOrDiscard with the attempt's identity.
	actx = logr.NewContext(actx, log)

	em.ctx, em.log = actx, log
	a := Attempt{ExecutionID: x.id, Number: n, Request: x.req, Deployment: d, CleanupGrace: e.grace}
	done := make(chan result, 1) // buffered: an abandoned adapter's send must not block
	go func() {
		stack.Grow() // the adapter's encoding and decoding run deeper than a new stack holds
		done <- execute(actx, adapter, a, em, call)
	}()

	var (
		r     result
		ended bool // the attempt's context ended before the adapter returned
	)
	select {
	case r = <-done:
	case <-actx.Done():
		ended = true
		grace := time.NewTimer(e.grace)
		select {
		case r = <-done:
		case <-grace.C:
			log.Info("Adapter did not return within the cleanup grace; abandoning it", "grace", e.grace)
		}
		grace.Stop()
	}
	output := em.close()

	// What the adapter returned before the attempt's context ended is the outcome: a
	// success stays one even if the context ends a moment later. Once the context has
	// ended first (or the adapter failed while it was ending: both were ready and the
	// error is then most likely a consequence), the reason decides, whatever the adapter
	// returned.
	if !ended && (r.err == nil || actx.Err() == nil) {
		if r.err != nil {
			return attemptResult{err: adapterError(r.err, log), outputRecorded: output, notSent: errors.Is(r.err, ErrNotSent) && !output}
		}
		return attemptResult{out: r.out, outputRecorded: output}
	}
	switch {
	case ctx.Err() != nil:
		return attemptResult{err: causeError(context.Cause(ctx)), outputRecorded: output}
	case actx.Err() != nil:
		log.Info("Attempt timed out", "timeout", d.AttemptTimeout)
		return attemptResult{err: errProviderTimeout(), outputRecorded: output}
	case r.err != nil:
		return attemptResult{err: adapterError(r.err, log), outputRecorded: output}
	}
	return attemptResult{out: r.out, outputRecorded: output}
}

// adapterCall is how an attempt calls its adapter: Adapter.Execute, or a Resumer's
// Resume.
type adapterCall func(ctx context.Context, ad Adapter, a Attempt, em Emitter) (Outcome, error)

// execute calls the adapter, turning a panic into an error so that one faulty adapter
// fails its attempt rather than the whole process.
func execute(ctx context.Context, ad Adapter, a Attempt, em Emitter, call adapterCall) (r result) {
	defer func() {
		if p := recover(); p != nil {
			r = result{err: fmt.Errorf("adapter panic: %v", p)}
		}
	}()
	if call == nil {
		call = func(ctx context.Context, ad Adapter, a Attempt, em Emitter) (Outcome, error) {
			return ad.Execute(ctx, a, em)
		}
	}
	out, err := call(ctx, ad, a, em)
	return result{out: out, err: err}
}

// adapterError maps an adapter's error to the portable error recorded for it. Adapters
// report failures as *protocol.Error with fixed messages; anything else is a bug or an
// unmapped dependency error, whose text must not reach the caller, so it becomes internal
// and is only logged. A copy is recorded, so that an adapter that keeps and changes its
// error cannot change what is recorded.
func adapterError(err error, log logr.Logger) *protocol.Error {
	var pe *protocol.Error
	if errors.As(err, &pe) && pe.Code.Known() {
		log.Info("Attempt failed", "code", pe.Code, "retryable", pe.Retryable)
		return pe.Clone()
	}
	log.Error(err, "Attempt failed with an unmapped error")
	return errInternal()
}
