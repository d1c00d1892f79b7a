package openai

import (
	"strconv"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/sse"
)

// BenchmarkResponsesStream measures the projection of a streamed answer (a route, 1000
// text deltas of a few characters, usage and the end) onto Responses frames, against
// the native event stream's encoding of the same events (each envelope in an SSE frame,
// as GET /v1/executions/{id}/events writes it), in the same loop: door/native is the
// ratio of their times, ns/event and B/event the door's own cost.
func BenchmarkResponsesStream(b *testing.B) {
	pairs := append([]any{}, routeEv...)
	for i := range 1000 {
		pairs = append(pairs, text(0, "tok"+strconv.Itoa(i%10)+" ")...)
	}
	pairs = append(pairs, usageEv...)
	pairs = append(pairs, protocol.EventCompleted, `{"finish_reason":"stop"}`)
	evs := execution(pairs...)
	var nativeBuf, env, doorBuf []byte
	var native, door time.Duration
	bytes := 0
	for b.Loop() {
		t0 := time.Now()
		nativeBuf = nativeBuf[:0]
		for i := range evs {
			env = protocol.AppendEnvelope(env[:0], &evs[i])
			nativeBuf = append(nativeBuf, "id: "...)
			nativeBuf = strconv.AppendUint(nativeBuf, evs[i].Sequence, 10)
			nativeBuf = append(nativeBuf, '\n')
			nativeBuf = sse.AppendEvent(nativeBuf, "", string(evs[i].Type), env)
		}
		t1 := time.Now()
		p := newRespProjection(respView{id: testExec, createdAt: testStart}, -1)
		doorBuf = doorBuf[:0]
		for i := range evs {
			doorBuf = p.apply(doorBuf, &evs[i])
		}
		t2 := time.Now()
		native += t1.Sub(t0)
		door += t2.Sub(t1)
		bytes = len(doorBuf)
	}
	b.ReportMetric(float64(door)/float64(native), "door/native")
	b.ReportMetric(float64(door.Nanoseconds())/float64(b.N*len(evs)), "ns/event")
	b.ReportMetric(float64(bytes)/float64(len(evs)), "B/event")
}
