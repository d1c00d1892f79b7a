// Package enginetest holds test helpers for the engine and its provider adapters: a
// recording Emitter and the envelopes and snapshot the engine would make of what it
// recorded, a log sink, and a Harness running adapters inside a real Engine. It is for
// tests only.
package enginetest
