// Package sse reads and writes server-sent event streams (text/event-stream).
//
// The Decoder follows the WHATWG HTML Living Standard, "Interpreting an event stream":
// one leading UTF-8 byte order mark is skipped; lines end with CRLF, LF or CR (also when
// a CRLF pair is split between two reads); lines starting with ':' are comments; a
// field's value is what follows the first ':' minus one leading space; data lines
// accumulate; id sets the last-event-ID buffer unless the value holds U+0000; retry is
// honoured only when its value is all ASCII digits; unknown fields are ignored; a blank
// line dispatches the event, and an event with no data is not dispatched at all; bytes
// that are not valid UTF-8 are replaced by U+FFFD the way the standard's UTF-8 decoder
// does; an incomplete frame at the end of the stream is discarded. Unlike a browser, the
// Decoder bounds the memory one frame may use (WithMaxFrameSize).
//
// The same decoder serves the Go client (reading Switchboard's own event stream,
// spec/events.md "Server-sent events") and provider adapters reading a provider's stream,
// so both agree on every edge case.
//
// The encoding side (AppendEvent, AppendComment, AppendRetry and Encoder) produces frames
// that this Decoder, and any conforming reader, decode back to the same values.
package sse
