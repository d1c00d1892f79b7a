package stack

import (
	"runtime/debug"
	"testing"

	"github.com/switchboard-dev/switchboard/runtime/internal/stack/stacktest"
)

// afterGrow is the stack a goroutine can use after Grow without the runtime growing its
// stack again: 8 KiB less the runtime's guard area (about 1 KiB, 2 with the race
// detector) and a few frames.
const afterGrow = 4 << 10

// TestGrow: after Grow a goroutine uses afterGrow bytes of stack without the runtime
// copying its stack, which it does when the goroutine has not called Grow.
func TestGrow(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1)) // a collection can copy a stack too
	copied := func(grow bool) bool {
		ch := make(chan bool)
		go func() {
			if grow {
				Grow()
			}
			ch <- stacktest.Copied(func() { stacktest.Use(afterGrow) })
		}()
		return <-ch
	}
	if !copied(false) {
		t.Fatalf("a new goroutine used %d bytes of stack without growing it: goroutines start with 8 KiB or more, and Grow has nothing to do", afterGrow)
	}
	if copied(true) {
		t.Errorf("a goroutine that called Grow grew its stack again to use %d bytes", afterGrow)
	}
}
