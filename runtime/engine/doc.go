// Package engine drives the lifecycle of executions (CONTRACT §4–5): one route snapshot
// per execution, attempts in route order with fallback only for retryable failures before
// any output, one deadline across all attempts, cancellation, and exactly one terminal
// event. Every event is recorded in the EventStore, which is the only state shared
// between replicas.
//
// Submit makes every synchronous decision (routing 422, concurrency 429) before anything
// exists, then creates the execution, records execution.accepted and runs the execution
// in its own goroutine, detached from the caller's context. The running goroutine is the
// execution's only writer, so sequences are assigned without coordination between
// replicas; adapters produce event data through an Emitter and never see an envelope.
//
// How an execution ends:
//
//   - success: execution.completed {finish_reason};
//   - a retryable failure before any output of the attempt, with candidates left and the
//     deadline not passed: route.attempt_failed, then the next candidate;
//   - any other failure: execution.failed with the adapter's *protocol.Error; an error of
//     another kind becomes internal with a fixed message (its text is only logged);
//   - an attempt timeout (Deployment.AttemptTimeout) is provider_timeout, retryable;
//   - the execution deadline (deadline_ms, capped by policy; it covers every attempt and
//     is never reset) is deadline_exceeded, not retryable, and no attempt starts after it;
//   - a cancel request (Store.RequestCancel, from any replica) is cancelled;
//   - engine shutdown is provider_unavailable, retryable: the caller did nothing wrong and
//     may submit again to a replica that is still serving;
//   - no factory for the deployment's provider is internal (a build or configuration
//     bug); a factory error is provider_rejected (the deployment is unusable), both not
//     retryable, like the operator problems the contract maps to them.
//
// After cancel, deadline or shutdown the adapter gets Config.CleanupGrace to return; then
// the terminal event is written anyway and the adapter's later emits are refused.
//
// The engine reports no runtime usage of its own: whether a request reached the provider
// is known only to the adapter, which reports it as usage.
package engine
