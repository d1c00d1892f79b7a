// Package client is the Go client of Switchboard's execution HTTP API (spec/http-api.md,
// "Go client").
//
// It submits executions (optionally with an Idempotency-Key), reads their status and
// result snapshot, cancels them, and reads their event stream. The stream is decoded with
// package sse, which follows the WHATWG rules, and every envelope is checked to continue
// the stream's sequence without gaps or duplicates. A stream that ends before its
// terminal event yields a *TruncatedError carrying the last sequence received; Follow and
// FollowResult resume from it automatically, with bounded, jittered backoff, and
// FollowResult folds the events with protocol's Apply, the same function the server uses
// for GET /result, so both produce the same snapshot for the same events.
//
// WithBearerToken and WithTokenFile authenticate the client to a runtime that checks its
// callers (spec/authentication.md); WithTokenFile follows a projected ServiceAccount token
// as the kubelet rotates it.
//
// Errors answered by the server are *Error values carrying the portable protocol.Error.
package client
