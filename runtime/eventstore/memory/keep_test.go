package memory

import (
	"bytes"
	"strings"
	"testing"
)

func TestKeepCopiesIntoChunks(t *testing.T) {
	var e execution
	var kept [][]byte
	var want []string
	for i := range 100 {
		data := []byte(strings.Repeat(string(rune('a'+i%26)), 1+i%40))
		kept = append(kept, e.keep(data))
		want = append(want, string(data))
		data[0] = 'X' // the caller's bytes are its own
	}
	// Growing one copy in place must not reach the next.
	_ = append(kept[0], "XXXXXXXX"...)
	for i, k := range kept {
		if string(k) != want[i] {
			t.Fatalf("copy %d = %q, want %q", i, k, want[i])
		}
	}
	if e.keep(nil) != nil {
		t.Error("keep(nil) is not nil")
	}

	// A large payload has an allocation of its own and leaves the chunk to small ones.
	chunk := e.payloads
	large := bytes.Repeat([]byte("L"), maxPayloadChunk/4+1)
	if got := e.keep(large); !bytes.Equal(got, large) || len(e.payloads) != len(chunk) {
		t.Errorf("large payload: equal %v, chunk length %d → %d", bytes.Equal(got, large), len(chunk), len(e.payloads))
	}

	// Small payloads cost an allocation per chunk, not per payload.
	allocs := testing.AllocsPerRun(10, func() {
		var e execution
		for range 100 {
			e.keep([]byte(`{"index":0,"type":"text","text":"token"}`))
		}
	})
	if allocs > 5 {
		t.Errorf("%.0f allocations for 100 small payloads, want at most 5", allocs)
	}
}
