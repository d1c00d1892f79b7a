package redis

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// tailSeqs returns the sequences in t's tail.
func tailSeqs(t *topic) []uint64 {
	var seqs []uint64
	for _, a := range t.tail {
		seqs = append(seqs, a.seq)
	}
	return seqs
}

func TestTopicTailKeepsTheLatestConsecutiveEvents(t *testing.T) {
	h := &hub{topics: map[string]*topic{}}
	tp := &topic{}
	h.topics["c"] = tp
	event := func(seq uint64) string { return "output.delta\nts\n1" + strconv.FormatUint(seq, 10) }

	for seq := uint64(1); seq <= tailEvents+10; seq++ {
		h.remember(tp, seq, event(seq))
	}
	if got := tailSeqs(tp); len(got) != tailEvents || got[0] != 11 || got[len(got)-1] != tailEvents+10 {
		t.Fatalf("tail after %d events holds %v, want the last %d", tailEvents+10, got, tailEvents)
	}
	if got := h.announced("c", 9, 0); got != nil {
		t.Errorf("announced after a dropped event = %d events, want none", len(got))
	}
	if got := h.announced("c", tailEvents+10, 0); got != nil {
		t.Errorf("announced after the last event = %d events, want none", len(got))
	}
	if got := h.announced("c", 20, 3); len(got) != 3 || got[0].seq != 21 || got[0].event != event(21) {
		t.Errorf("announced(after 20, limit 3) = %v, want 21..23", got)
	}

	// A gap (messages lost over a reconnect) starts the tail again.
	h.remember(tp, tailEvents+20, event(tailEvents+20))
	if got := tailSeqs(tp); len(got) != 1 || got[0] != tailEvents+20 {
		t.Errorf("tail after a gap holds %v, want only the new event", got)
	}
	if got := h.announced("c", tailEvents+10, 0); got != nil {
		t.Errorf("announced across a gap = %v, want none", got)
	}

	// Bytes are bounded per topic, an event too large for a tail is not kept (nor any
	// before it, which would leave a gap), and the hub's count follows.
	big := strings.Repeat("x", tailBytes/4)
	for seq := uint64(tailEvents + 21); seq <= tailEvents+30; seq++ {
		h.remember(tp, seq, big)
	}
	if tp.tailBytes > tailBytes || len(tp.tail) != 4 {
		t.Errorf("tail of large events: %d events, %d bytes; want 4 within %d", len(tp.tail), tp.tailBytes, tailBytes)
	}
	h.remember(tp, tailEvents+31, strings.Repeat("x", tailBytes+1))
	if len(tp.tail) != 0 || tp.tailBytes != 0 || h.tailBytes != 0 {
		t.Errorf("after an oversized event: %d events, %d bytes, hub %d; want none", len(tp.tail), tp.tailBytes, h.tailBytes)
	}
	h.remember(tp, tailEvents+32, event(1))
	if h.tailBytes != len(event(1)) {
		t.Errorf("hub counts %d bytes, want %d", h.tailBytes, len(event(1)))
	}
	h.drop("c", tp)
	if h.tailBytes != 0 || h.topics["c"] != nil {
		t.Errorf("after drop: hub counts %d bytes, topic kept: %v", h.tailBytes, h.topics["c"] != nil)
	}
}

func TestHubTailBudget(t *testing.T) {
	h := &hub{topics: map[string]*topic{}}
	size := tailBytes / 2
	n := hubTailBytes / size // topics that fill the budget with one event each
	for i := range n {
		tp := &topic{}
		h.topics[strconv.Itoa(i)] = tp
		h.remember(tp, 1, strings.Repeat("x", size))
	}
	extra := &topic{}
	h.remember(extra, 1, "x")
	if len(extra.tail) != 0 || h.tailBytes != hubTailBytes {
		t.Errorf("past the hub's budget: kept %d events, hub counts %d bytes; want none and %d", len(extra.tail), h.tailBytes, hubTailBytes)
	}
}

// The periodic sweep drops the tails of topics nobody waits on, subscribed or not.
func TestSweepDropsIdleTails(t *testing.T) {
	h := &hub{topics: map[string]*topic{}, wanted: map[string]struct{}{}}
	idle := &topic{subscribed: true, isReady: true, idleSince: time.Now()}
	busy := &topic{subscribed: true, isReady: true, refs: 1}
	h.topics["idle"], h.topics["busy"] = idle, busy
	h.remember(idle, 1, "output.delta\nts\n1{}")
	h.remember(busy, 1, "output.delta\nts\n1{}")
	h.sync(true)
	if len(idle.tail) != 0 || len(busy.tail) != 1 || h.tailBytes != busy.tailBytes {
		t.Errorf("after the sweep: idle tail %d, busy tail %d, hub %d bytes; want 0, 1 and the busy one's", len(idle.tail), len(busy.tail), h.tailBytes)
	}
	if h.topics["idle"] == nil {
		t.Error("the sweep forgot a topic idle for less than linger")
	}
}
