// Package protocol defines Switchboard's wire types: the execution request and its parts,
// the event envelope and event data, the result snapshot, portable errors and usage
// (CONTRACT sections 4–8). It has no dependencies on the rest of the runtime; every other
// runtime package speaks in these types.
package protocol
