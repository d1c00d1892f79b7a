// Package stack grows a goroutine's stack before the goroutine needs it.
//
// A goroutine starts with a small stack: 2 KiB, or the average the runtime has seen
// goroutines use (4 KiB in the running binary). When a call needs more than is left, the
// runtime allocates a stack twice the size, copies the old one over and adjusts every
// frame on it. Deep in a reflective encoder that copy costs more than the encoding
// itself: an attempt's goroutine, which encodes the provider request with
// encoding/json's reflection and decodes the provider's stream, spent about 2 % of the
// runtime's CPU time per streamed execution growing its stack (spec/performance.md,
// "Goroutine stacks").
//
// Grow, called first thing on such a goroutine, grows its stack to 8 KiB while it is one
// frame deep, so that the copy is of one frame. No library offers this; CockroachDB's
// growstack package is the same trick. It is for goroutines known to need the stack:
// one that stays shallow keeps 8 KiB for nothing.
package stack

// Grow makes the calling goroutine's stack at least 8 KiB, at the cost of copying the
// frames on it now.
func Grow() { _ = grow() }

// grow needs a frame of 5 KiB, which a stack of 4 KiB cannot hold, so the runtime
// doubles the stack until it can: to 8 KiB.
//
// It is never inlined: inlined, its frame would become part of its caller's and stay on
// the stack for as long as the caller runs, taking 5 of the 8 KiB it grew for the calls
// that follow (TestGrow).
//
//go:noinline
func grow() byte {
	var frame [5 << 10]byte
	// An index the compiler cannot know keeps the array, and so the frame, in place.
	return frame[index]
}

// index is always 0; grow reads its frame there.
var index int
