package engine

// growStack makes the calling goroutine's stack 8 KiB (from the 2 or 4 KiB a goroutine
// starts with) while the goroutine is still shallow, by calling a function whose frame
// needs that much.
//
// An attempt's goroutine needs more than it starts with: encoding/json's reflection
// (the provider request), the stream decoder and the store's fold all run on it. The
// runtime grows a stack by copying it to one twice the size and adjusting every frame on
// it, which deep in a reflective encoder took longer than the encoding itself (about 2 %
// of the runtime's CPU time per streamed execution, spec/performance.md, "Goroutine
// stacks"). Growing it once, at the goroutine's first call, copies one frame. No library
// does this; CockroachDB's growstack package is the same trick.
//
//go:noinline
func growStack() byte {
	var frame [5 << 10]byte
	// An index the compiler cannot know keeps the array, and so the frame, in place.
	return frame[growIndex]
}

// growIndex is always 0; growStack reads its frame there.
var growIndex int
