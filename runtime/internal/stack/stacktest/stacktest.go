// Package stacktest observes goroutine stacks in tests: whether the runtime copied the
// calling goroutine's stack while a function ran, which is how it grows a stack, and
// a way to use a given amount of stack.
package stacktest

import "unsafe"

// Copied reports whether the runtime copied the calling goroutine's stack while f ran.
// A copy moves every frame, so an address on the stack taken before f differs from the
// same one taken after. The runtime copies a stack to grow it, and also to shrink it
// during a garbage collection: a test that looks for growth turns the collector off
// (debug.SetGCPercent(-1)).
func Copied(f func()) bool {
	var probe byte
	before := address(&probe)
	f()
	return address(&probe) != before
}

// address is where b is, as a number: unlike a pointer, the runtime leaves it as it was
// when it copies the stack.
func address(b *byte) uintptr {
	return uintptr(unsafe.Pointer(b)) //nolint:gosec // compared, never turned back into a pointer
}

// Use calls itself until its frames hold at least n bytes of stack, as a call that
// needs n bytes of stack would.
func Use(n int) {
	_ = use(n)
}

// frameBytes is the size of use's array, most of its frame.
const frameBytes = 256

// use is recursive, so never inlined: each call is a frame of its own.
func use(n int) byte {
	var frame [frameBytes]byte
	frame[n%frameBytes] = byte(n)
	if n > frameBytes {
		frame[0] += use(n - frameBytes)
	}
	// An index the compiler cannot know keeps the array, and so the frame, in place.
	return frame[index]
}

// index is always 0.
var index int
