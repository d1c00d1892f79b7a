package engine

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/pricing"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// Adapter runs attempts against one configured model. It is built from one routing-table
// entry (endpoint, model, credential — credentials are constructor inputs only) and only
// produces event data: the engine assigns every envelope (sequence, timestamp, execution
// id), decides fallback and enforces deadlines.
type Adapter interface {
	// Execute runs one attempt. It emits output through emit as it arrives and returns
	// when the provider is done. A failure is returned as a *protocol.Error with a fixed
	// message (any other error is recorded as internal, its text only logged); a request
	// refused before anything was sent is returned wrapped by NotSent, so the engine
	// tries the next candidate. ctx ends
	// on cancellation, deadline or attempt timeout; once it has ended the engine decides
	// the outcome from the reason, whatever Execute returns. An adapter that must clean
	// up remotely (cancel a job) may do so with context.WithoutCancel bounded by
	// Attempt.CleanupGrace — the engine waits no longer, then records the terminal event
	// and refuses the adapter's later emits.
	Execute(ctx context.Context, a Attempt, emit Emitter) (Outcome, error)
}

// Attempt is what an adapter needs for one attempt.
type Attempt struct {
	// ExecutionID identifies the execution, for logs and provider-side correlation.
	ExecutionID string
	// Number is the attempt number, from 1.
	Number int
	// Request is the decoded request; adapters must not modify it.
	Request *protocol.Request
	// Deployment is the routing-table entry the attempt runs on.
	Deployment *routing.Deployment
	// CleanupGrace bounds remote cleanup after ctx ends.
	CleanupGrace time.Duration
}

// Emitter records event data for the running attempt (spec/events.md, "Event types").
// It is safe for concurrent use.
//
// Each method records one event, or — for a text or tool-argument delta whose data is
// larger than protocol.MaxEventBytes — consecutive events that the result snapshot
// concatenates back into it. It returns nil once recorded; ErrInvalidEvent for data that
// breaks the method's rules (nothing is recorded, and the attempt goes on);
// ErrOutputTooLarge when recording would take the execution past its event or output
// limit (Config.MaxEvents, Config.MaxOutputBytes), or one event's data is larger than
// protocol.MaxEventBytes and cannot be split: nothing was recorded, and the execution
// fails with output_too_large; ErrAttemptOver once the attempt's ctx has ended or Execute
// has returned; and a store error if recording failed (then nothing was recorded). Data
// is checked before the attempt's end is: invalid data gives ErrInvalidEvent even then.
type Emitter interface {
	// Text records an output.delta of text at output part index (≥ 0). The text counts
	// towards the output limit.
	Text(index int, text string) error
	// ToolStarted records a tool.call.started; callID and name are required, index is
	// ≥ 0.
	ToolStarted(index int, callID, name string) error
	// ToolArgs records a tool.call.arguments.delta of the call callID (required). The
	// fragment counts towards the output limit.
	ToolArgs(callID, delta string) error
	// Progress records an execution.progress: stage queued or running, percent
	// between 0 and 100 and queue_position ≥ 0 when set.
	Progress(p protocol.ProgressData) error
	// Result records an output.result: result as the provider gave it (valid JSON, or
	// empty), artifacts with uri and media_type (nil is the empty list). The result
	// counts towards the output limit.
	Result(r protocol.OutputResultData) error
	// Usage records a usage.reported of usage. Entries that are not protocol.Usage.Valid
	// (NaN, infinite, negative, unknown unit or source) are dropped and logged; when none
	// remain nothing is recorded and Usage returns nil.
	Usage(usage []protocol.Usage) error

	// RemoteJob records handle as the job this attempt created at the provider, as soon
	// as the provider has named it, for an adapter whose work continues remotely (see
	// Resumer): should this replica stop, the replica that takes the execution over
	// resumes the attempt from the handle instead of ending it. The handle is the
	// adapter's own JSON (at most MaxRemoteJobBytes) and must hold everything Resume
	// needs besides the deployment: the job's id and URLs, never a credential. A later
	// call replaces it. It returns nil once recorded; ErrAttemptOver when the attempt
	// has ended, except while it is being handed over (Detached: a job the provider
	// names during the cleanup grace is still recorded, for the next owner to adopt);
	// ErrInvalidEvent for an empty, oversized or invalid handle; and a store error if
	// recording failed. The attempt goes on either way, but an adapter whose handle
	// was not recorded must not leave the job running unfollowed.
	RemoteJob(handle json.RawMessage) error
}

// MaxRemoteJobBytes bounds the handle of Emitter.RemoteJob.
const MaxRemoteJobBytes = 16 << 10

// Resumer is implemented by adapters whose attempts continue remotely after the request
// that started them returned (Replicate's predictions): a job that a replica created
// and recorded with Emitter.RemoteJob outlives the replica, and the replica that takes
// the execution over adopts it (spec/events.md, "Ownership and orphans"). The engine
// does the rest: leases, deadlines, cancels and the terminal event work for a resumed
// attempt exactly as for one this replica started.
type Resumer interface {
	// Resume continues the attempt that recorded handle: it follows the remote job from
	// where it is now, emits what is left (progress, output.result, usage) and returns
	// as Execute does. a.Request is nil: whatever the adapter needs besides a.Deployment
	// is in the handle. When ctx has already ended — a cancel was requested, or the
	// deadline passed, before the takeover — Resume cancels the job remotely within
	// a.CleanupGrace, as Execute does when its context ends, and returns.
	Resume(ctx context.Context, a Attempt, handle json.RawMessage, emit Emitter) (Outcome, error)
}

// Detached reports whether ctx, an attempt's context, ended because this replica let the
// execution go: it is shutting down and hands the execution over, or another replica
// acquired its lease. The remote job then belongs to the replica that takes over, so an
// adapter must leave it running (not cancel it) when Detached is true.
func Detached(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), errHandedOver) || errors.Is(context.Cause(ctx), errLeaseLost)
}

// WithDetach returns a child of parent and a function that ends it the way the engine
// ends an attempt it hands over (Detached reports true for it), for adapter tests.
func WithDetach(parent context.Context) (ctx context.Context, detach func()) {
	ctx, cancel := context.WithCancelCause(parent)
	return ctx, func() { cancel(errHandedOver) }
}

// Errors returned by an Emitter; test with errors.Is.
var (
	// ErrAttemptOver: the attempt has ended (cancelled, timed out, past its deadline, or
	// Execute returned), so nothing more is recorded for it.
	ErrAttemptOver = errors.New("engine: attempt is over")
	// ErrInvalidEvent: the event's data breaks the rules of its Emitter method.
	ErrInvalidEvent = errors.New("engine: invalid event")
	// ErrOutputTooLarge: recording the event would take the execution past its event or
	// output limit (Config.MaxEvents, Config.MaxOutputBytes), or one event's data is
	// larger than protocol.MaxEventBytes and cannot be split. Nothing was recorded, the
	// attempt is ending, and the execution fails with output_too_large.
	ErrOutputTooLarge = errors.New("engine: execution output limit reached")
)

// ErrNotSent marks an attempt failure that happened before anything was sent to the
// provider: the adapter refused a request it cannot encode. It is not a provider
// failure, so the engine moves on to the next candidate whatever the error's
// retryability (spec/routing.md, "Eligibility"). Wrap a refusal with NotSent.
var ErrNotSent = errors.New("engine: the request was not sent to the provider")

// NotSent returns pe marked as a refusal before anything was sent (see ErrNotSent).
// errors.As still finds pe in it.
func NotSent(pe *protocol.Error) error { return &notSent{pe} }

type notSent struct{ pe *protocol.Error }

func (n *notSent) Error() string   { return n.pe.Error() }
func (n *notSent) Unwrap() []error { return []error{ErrNotSent, n.pe} }

// EncodeCheck reports whether an adapter can encode req for deployment d: every part's
// type, role and media form, and every model parameter the request sets. It returns nil,
// or a refusal with a fixed message: code unsupported_capability when the request cannot
// be expressed for d's provider, or invalid_request when the caller asked for something
// d does not allow (a model parameter outside spec.allowedParameters).
//
// Routing asks it about candidate deployments that pass the capability checks, so it
// must be pure (no I/O), cheap, and agree with what the adapter's Execute does: a request
// it admits is one Execute sends. Its verdict may depend only on req and d's Provider,
// Capabilities and Parameters; the engine reuses it for deployments that share them.
type EncodeCheck func(req *protocol.Request, d *routing.Deployment) *protocol.Error

// Provider is one provider adapter as the engine uses it.
type Provider struct {
	// New builds the adapter of one attempt. Required.
	New Factory
	// CanEncode is the adapter's EncodeCheck; nil admits every request that routing
	// matched by capability.
	CanEncode EncodeCheck
	// Operation is the GenAI operation name of its attempts (gen_ai.operation.name:
	// chat, generate_content, …), for their spans; empty means DefaultOperation.
	Operation string
	// Counting says how the adapter's provider counts the tokens of its usage reports:
	// whether the input count includes the cached tokens, and the output count the
	// reasoning tokens, it also reports. The cost facts of its usage reports and
	// Budget settlement price every token once with it (spec/budgets.md, "Pricing").
	// The zero value
	// says neither count includes the other, right for a provider that reports no
	// token counts at all.
	Counting pricing.Counting
}

// Outcome is the result of a successful attempt.
type Outcome struct {
	// FinishReason is the provider's finish reason, if any.
	FinishReason string
	// ResponseModel is the model the provider says answered, when it reports one
	// (gen_ai.response.model on the attempt's span).
	ResponseModel string
}

// Factory builds the adapter for a deployment. The engine calls it once per attempt with
// the deployment from the execution's route snapshot, carrying the credential current
// at that attempt, so a rotated credential is used by the next attempt. A failure means
// nothing was sent: the engine falls back to the next candidate. A *protocol.Error it
// returns is recorded as is; any other error becomes provider_rejected (the deployment's
// configuration is unusable).
type Factory func(d *routing.Deployment) (Adapter, error)
