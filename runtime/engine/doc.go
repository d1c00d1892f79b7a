// Package engine drives the lifecycle of executions (spec/http-api.md and spec/events.md):
// one route snapshot per execution, attempts in route order with fallback only for
// retryable failures before any output, one deadline across all attempts, cancellation,
// per-execution limits, and exactly one terminal event. Every event is recorded in the
// EventStore, which is the only state shared between replicas.
//
// Submit is the one way in for every front door, and makes every synchronous decision
// before anything exists: the idempotency key (reserved in the store, or replayed: 422
// for another request with the key, 429 when the caller holds too many keys, 409 while
// the key's first request is undecided), routing on one snapshot of the table (each
// candidate's adapter is asked whether it can encode the request; 422, or 400 for a
// parameter no deployment allows) and concurrency (429). Then it names the execution,
// creates it, records execution.accepted and runs it in its own goroutine, detached from
// the caller's context; a refused submission releases its key. The running goroutine is the execution's only writer, so
// sequences are assigned without coordination between replicas; adapters produce event
// data through an Emitter and never see an envelope.
//
// How an execution ends:
//
//   - success: execution.completed {finish_reason};
//   - a retryable failure before any output of the attempt, or a refusal before anything
//     was sent (the adapter could not be built or cannot encode the request), with
//     candidates left and the deadline not passed: route.attempt_failed, then the next
//     candidate of the same snapshot, its credential included;
//   - any other failure: execution.failed with the adapter's *protocol.Error; an error of
//     another kind becomes internal with a fixed message (its text is only logged);
//   - an attempt timeout (Deployment.AttemptTimeout) is provider_timeout;
//   - the execution deadline (deadline_ms, capped by policy; it covers every attempt and
//     is never reset) is deadline_exceeded, and no attempt starts after it;
//   - a cancel request (Store.RequestCancel, from any replica) is cancelled;
//   - engine shutdown is provider_unavailable: the caller did nothing wrong and may submit
//     again to a replica that is still serving;
//   - more events than Config.MaxEvents or more output than Config.MaxOutputBytes is
//     output_too_large; the event that would cross the limit is not recorded.
//
// Every terminal failure goes through one rule (settle): retryable is the code's table
// value, lowered by the adapter if it says so, never raised, and false once the
// execution has recorded any output or tool event.
//
// After cancel, deadline or shutdown the adapter gets Config.CleanupGrace to return; then
// the terminal event is written anyway and the adapter's later emits are refused.
//
// The engine reports no runtime usage of its own: whether a request reached the provider
// is known only to the adapter, which reports it as usage.
package engine
