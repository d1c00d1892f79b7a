//go:build !race

package openai

import "testing"

// Allocation counts of the Responses stream's hot path, a regression guard that counts
// instead of timing. Built without the race detector only, which changes the counts;
// `make test` runs it in its run without -race.

// TestResponsesStreamAllocations: projecting a text delta allocates nothing but the
// growth of the text it keeps (amortized: under 0.1 allocation per delta here).
func TestResponsesStreamAllocations(t *testing.T) {
	pairs := append([]any{}, routeEv...)
	for range 1000 {
		pairs = append(pairs, text(0, "tok ")...)
	}
	evs := execution(pairs...)
	buf := make([]byte, 0, 64<<10)
	p := newRespProjection(respView{id: testExec, createdAt: testStart}, -1)
	for i := range evs[:3] {
		buf = p.apply(buf[:0], &evs[i])
	}
	i := 3
	allocs := testing.AllocsPerRun(len(evs)-4, func() {
		buf = p.apply(buf[:0], &evs[i])
		i++
	})
	if allocs > 0.1 {
		t.Errorf("%.2f allocations per text delta, want at most 0.1", allocs)
	}
}
