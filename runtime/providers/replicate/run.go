package replicate

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/go-logr/logr"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/providerhttp"
)

// maxPollFailures is how many polls in a row may fail transiently (rate limited, 5xx,
// connection errors) before the attempt gives up. The prediction keeps running remotely
// whatever happens to one poll, so a blip must not throw away (and pay twice for) its work.
const maxPollFailures = 5

// pollGrowth is the factor between successive waits, up to the adapter's pollMax.
const pollGrowth = 1.5

// run is one attempt: one prediction, followed from its creation to its end.
type run struct {
	a     *adapter
	emit  engine.Emitter
	log   logr.Logger
	grace time.Duration
	// last is the progress last emitted; progress is emitted only when it changes.
	last *protocol.ProgressData
	// recorded is set once the prediction's handle is recorded (Emitter.RemoteJob), so
	// that a replica taking the execution over can adopt it.
	recorded bool
}

func newRun(ctx context.Context, a *adapter, at engine.Attempt, emit engine.Emitter) *run {
	grace := at.CleanupGrace
	if grace <= 0 {
		grace = engine.DefaultCleanupGrace
	}
	log := logr.FromContextOrDiscard(ctx).WithValues("provider", Provider)
	return &run{a: a, emit: emit, log: log, grace: grace}
}

// execute creates the prediction and follows it. The create request is never retried:
// it is not idempotent, and a second prediction would run (and bill) twice. Retryable
// failures go back to the engine, which may fall back to another deployment.
//
// The create is sent on a context detached from the attempt's. When the attempt ends
// (cancel, deadline, attempt timeout) while the create is in flight, the adapter keeps
// waiting for its answer for up to the cleanup grace and cancels the prediction it
// names: otherwise a prediction would run, and be billed, with nobody following it —
// and next to the one a fallback creates. After the grace the create is abandoned.
func (r *run) execute(ctx context.Context, target string, body []byte) (engine.Outcome, error) {
	if ctx.Err() != nil {
		return engine.Outcome{}, ended(ctx)
	}
	cctx, abandon := context.WithCancel(context.WithoutCancel(ctx))
	defer abandon()
	stop := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(r.grace, abandon)
		context.AfterFunc(cctx, func() { t.Stop() })
	})
	defer stop()

	var p prediction
	_, perr := r.a.send(cctx, http.MethodPost, target, body, &p)
	if perr == nil && p.Status == "" {
		perr = unreadable()
	}
	if ctx.Err() != nil {
		if perr != nil {
			// No prediction id: nothing can be cancelled. Past the grace the create's
			// fate is unknown; say so, since a prediction may be running.
			if cctx.Err() != nil {
				r.log.Info("Replicate create did not answer within the cleanup grace; a prediction may be running", "grace", r.grace)
			}
			return engine.Outcome{}, ended(ctx)
		}
		r.log.V(1).Info("Created Replicate prediction after the attempt ended", "prediction", r.a.safeID(p.ID), "status", p.Status)
		if !p.Status.terminal() {
			if engine.Detached(ctx) {
				// The replica taking over can adopt the prediction only if its handle
				// is recorded; the engine may refuse it now that the attempt is over.
				r.record(&p)
			}
			if !r.handOver(ctx, &p) {
				r.cancel(cctx, &p)
			}
		}
		return engine.Outcome{}, ended(ctx)
	}
	if perr != nil {
		// Without a response there is no prediction id, so nothing to cancel.
		return engine.Outcome{}, perr
	}
	r.log.V(1).Info("Created Replicate prediction", "prediction", r.a.safeID(p.ID), "status", p.Status)
	r.record(&p)
	return r.follow(ctx, &p, r.a.pollInit)
}

// record records p's handle with Emitter.RemoteJob, so that a replica taking the
// execution over can resume it. A failure is only logged: the attempt goes on, and
// only an adoption is lost.
func (r *run) record(p *prediction) {
	id := r.a.safeID(p.ID)
	h, ok := r.a.handle(p)
	if !ok {
		r.log.Info("Cannot record Replicate prediction for adoption: its id or URLs are unusable", "prediction", id)
		return
	}
	if err := r.emit.RemoteJob(h); err != nil {
		r.log.Info("Cannot record Replicate prediction for adoption", "prediction", id, "error", err.Error())
		return
	}
	r.recorded = true
}

// follow polls p's urls.get, first after wait, then with a growing wait, until p is
// terminal, emitting progress as it changes. A prediction rebuilt from a handle (Resume)
// has no status until the first poll answers, so nothing is emitted for it before.
// Any exit before a terminal status cancels the prediction remotely (see abandon).
func (r *run) follow(ctx context.Context, p *prediction, wait time.Duration) (engine.Outcome, error) {
	var hint time.Duration // the provider's retry-after, a lower bound for the next wait
	failures := 0
	for {
		if p.Status.terminal() {
			return r.finish(p)
		}
		if err := r.progress(p); err != nil {
			return r.abandon(ctx, p, err)
		}
		get, ok := r.a.sameOrigin(p.URLs.Get)
		if !ok {
			r.log.Info("Refused a Replicate URL outside the endpoint's origin", "field", "urls.get", "prediction", r.a.safeID(p.ID))
			return r.abandon(ctx, p, foreignURL())
		}
		if !sleep(ctx, max(wait, hint)) {
			return r.abandon(ctx, p, ended(ctx))
		}
		wait = min(max(time.Duration(float64(wait)*pollGrowth), r.a.pollInit), r.a.pollMax)

		var next prediction
		header, perr := r.a.send(ctx, http.MethodGet, get, nil, &next)
		if perr == nil && next.Status == "" {
			perr = unreadable()
		}
		switch {
		case ctx.Err() != nil:
			return r.abandon(ctx, p, ended(ctx))
		case perr != nil:
			failures++
			if !perr.Retryable || failures > maxPollFailures {
				return r.abandon(ctx, p, perr)
			}
			hint = time.Duration(perr.RetryAfterMs) * time.Millisecond
			r.log.V(1).Info("Replicate poll failed; retrying", "code", perr.Code, "failures", failures)
			continue
		}
		failures = 0
		hint, _ = providerhttp.RetryAfter(header, time.Now())
		*p = next
	}
}

// progress emits p's progress if it changed since the last one emitted.
func (r *run) progress(p *prediction) error {
	d, ok := progress(p.Status, p.Logs, r.a.redact)
	if !ok || (r.last != nil && r.last.Stage == d.Stage && r.last.Message == d.Message) {
		return nil
	}
	if err := r.emit.Progress(d); err != nil {
		return err
	}
	r.last = &d
	return nil
}

// finish ends the attempt on a terminal prediction. Success is one output.result, then
// the usage; the other statuses are failures (see statusError), after their usage, since
// a failed or cancelled prediction is billed for the time it ran.
func (r *run) finish(p *prediction) (engine.Outcome, error) {
	if p.Status != statusSucceeded {
		if err := r.usage(p); err != nil {
			// The failure matters more than its usage; the engine sees it either way.
			r.log.Info("Cannot record Replicate usage", "error", err.Error())
		}
		return engine.Outcome{}, r.a.statusError(p)
	}
	output := p.Output
	if len(output) == 0 {
		output = json.RawMessage("null")
	}
	output = r.a.redactJSON(output)
	completed, known := p.completedAt()
	res := protocol.OutputResultData{Result: output, Artifacts: artifacts(output, completed, known)}
	if err := r.emit.Result(res); err != nil {
		return engine.Outcome{}, err
	}
	if err := r.usage(p); err != nil {
		return engine.Outcome{}, err
	}
	return engine.Outcome{FinishReason: string(statusSucceeded)}, nil
}

// usage reports metrics.predict_time, when the prediction has one.
func (r *run) usage(p *prediction) error {
	pt := p.Metrics.PredictTime
	if pt == nil || *pt < 0 {
		return nil
	}
	return r.emit.Usage([]protocol.Usage{{Unit: UnitPredictTime, Quantity: *pt, Source: protocol.SourceProvider}})
}

// abandon cancels the unfinished prediction p remotely and returns err. The cancel runs
// on a context detached from ctx (which may have ended) and bounded by the cleanup grace,
// the longest the engine waits for the adapter. A prediction handed over (see handOver)
// is left running.
func (r *run) abandon(ctx context.Context, p *prediction, err error) (engine.Outcome, error) {
	if r.handOver(ctx, p) {
		return engine.Outcome{}, err
	}
	cctx, stop := context.WithTimeout(context.WithoutCancel(ctx), r.grace)
	defer stop()
	r.cancel(cctx, p)
	return engine.Outcome{}, err
}

// handOver reports whether p is to be left running for the replica that takes the
// execution over: ctx ended because this replica let the execution go (engine.Detached)
// and p's handle is recorded, so that replica adopts p (spec/events.md, "Ownership and
// orphans"). A prediction whose handle is not recorded could be adopted by nobody, and
// would run and bill unfollowed: it is cancelled as usual.
func (r *run) handOver(ctx context.Context, p *prediction) bool {
	if !engine.Detached(ctx) {
		return false
	}
	id := r.a.safeID(p.ID)
	if !r.recorded {
		r.log.Info("Cancelling Replicate prediction although the execution is handed over: its handle is not recorded", "prediction", id)
		return false
	}
	r.log.V(1).Info("Left Replicate prediction running for the replica taking the execution over", "prediction", id)
	return true
}

// cancel POSTs p's urls.cancel on ctx, if it is on the endpoint's origin. A failure is
// only logged: the attempt is ending either way.
func (r *run) cancel(ctx context.Context, p *prediction) {
	id := r.a.safeID(p.ID)
	target, ok := r.a.sameOrigin(p.URLs.Cancel)
	if !ok {
		r.log.Info("Cannot cancel Replicate prediction: its cancel URL is outside the endpoint's origin", "prediction", id)
		return
	}
	if _, perr := r.a.send(ctx, http.MethodPost, target, nil, nil); perr != nil {
		status := 0
		if perr.ProviderError != nil {
			status = perr.ProviderError.HTTPStatus
		}
		r.log.Info("Cannot cancel Replicate prediction", "prediction", id, "code", perr.Code, "httpStatus", status)
		return
	}
	r.log.V(1).Info("Cancelled Replicate prediction", "prediction", id)
}

// sleep waits d, or until ctx ends (then it returns false).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// ended is the error returned once the attempt's context has ended; the engine decides
// the recorded outcome from the reason, so it only needs to be a portable error.
func ended(ctx context.Context) error {
	return providerhttp.TransportError(ctx, Provider, ctx.Err())
}

// statusError maps a terminal failure status (spec/http-api.md, "Errors"; README
// "Status and error mapping"):
//
//   - failed: the model raised an error while predicting on this input. Replicate does
//     not say whether the input or the model is at fault (schema violations are already
//     rejected by the create call, 422), and running the same input on the same model
//     again typically fails the same way: provider_rejected, not retryable.
//   - canceled: someone else cancelled it (this adapter cancels only after its context
//     ended, when the engine decides the outcome) or a provider-side deadline passed after
//     it started. It ran and was billed, and the cancel was deliberate:
//     provider_unavailable, not retryable.
//   - aborted: a deadline passed before it started; nothing ran or was billed, so another
//     attempt is safe: provider_unavailable, retryable.
func (a *adapter) statusError(p *prediction) *protocol.Error {
	var e *protocol.Error
	switch p.Status {
	case statusFailed:
		e = protocol.NewError(protocol.CodeProviderRejected, "the provider's model failed on this input")
	case statusCanceled:
		e = protocol.NewError(protocol.CodeProviderUnavailable, "the provider cancelled the prediction")
		e.Retryable = false
	default: // aborted
		e = protocol.NewError(protocol.CodeProviderUnavailable, "the provider aborted the prediction before it started")
	}
	e.ProviderError = &protocol.ProviderError{Provider: Provider, Type: string(p.Status), RequestID: a.safeID(p.ID)}
	return e
}

// foreignURL is the error for a prediction whose urls.get leaves the endpoint's origin.
func foreignURL() *protocol.Error {
	return rejected("the provider returned a URL outside the deployment's endpoint")
}

// unreadable is the error for a response that is not a prediction object.
func unreadable() *protocol.Error { return providerhttp.Unreadable(Provider, "", false) }
