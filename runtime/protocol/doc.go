// Package protocol defines Switchboard's wire types: the execution request and its parts,
// the event envelope and event data, the result snapshot, portable errors and usage
// (spec/http-api.md, spec/events.md). It has no dependencies on the rest of the runtime;
// every other runtime package speaks in these types.
package protocol
