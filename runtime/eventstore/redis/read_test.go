package redis_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// maxCommand bounds the time Redis may spend in one command of a Read (SLOWLOG's unit
// is the microsecond): every other replica's commands wait meanwhile.
const maxCommand = 50 * time.Millisecond

// A Read of a long log, with no limit or with a limit that covers many large events,
// and a Snapshot of its large output are served by commands of bounded size: no single
// one makes Redis copy the log or the output.
func TestReadsInBoundedCommands(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	prefix := newPrefix(t)
	s, name := openNamed(t, prefix)
	admin := newClient(t)
	const id = "exe_long_log"
	createAccepted(ctx, t, s, id)
	// 32 MiB: events of the largest size an event may have, with small ones between,
	// of text and of a tool call's arguments.
	filler := strings.Repeat("x", protocol.MaxEventBytes-64)
	evs := []protocol.Event{event(id, 1, protocol.EventAccepted, `{}`)}
	add := func(typ protocol.EventType, data string) {
		evs = append(evs, event(id, uint64(len(evs)+1), typ, data))
	}
	add(protocol.EventToolCallStarted, `{"index":1,"call_id":"c1","name":"f"}`)
	for i := range 16 {
		for range 1 + 20*(i%2) {
			add(protocol.EventOutputDelta, `{"index":0,"text":"small"}`)
		}
		if i%4 == 3 {
			add(protocol.EventToolCallArgsDelta, `{"call_id":"c1","delta":"`+filler+`"}`)
		} else {
			add(protocol.EventOutputDelta, `{"index":0,"text":"`+filler+`"}`)
		}
	}
	for _, ev := range evs[1:] {
		if err := s.Append(ctx, eventstore.NoFence, ev); err != nil {
			t.Fatal(err)
		}
	}
	for _, cmd := range slowCommands(t, admin, name, func() {
		for _, tc := range []struct {
			after uint64
			limit int
		}{{0, 0}, {0, 32}, {3, 5}, {uint64(len(evs) - 1), 0}, {uint64(len(evs)), 0}} {
			got, err := s.Read(ctx, id, tc.after, tc.limit)
			if err != nil {
				t.Fatalf("Read(after %d, limit %d): %v", tc.after, tc.limit, err)
			}
			want := evs[tc.after:]
			if tc.limit > 0 {
				want = want[:min(len(want), tc.limit)]
			}
			if diff := diffEvents(want, got); diff != "" {
				t.Errorf("Read(after %d, limit %d): %s", tc.after, tc.limit, diff)
			}
		}
		snap, err := s.Snapshot(ctx, id)
		if err != nil {
			t.Fatalf("Snapshot: %v", err)
		}
		if diff := diffSnapshots(protocol.Materialize(id, evs), snap); diff != "" {
			t.Errorf("Snapshot: %s", diff)
		}
	}) {
		args := cmd.Args[:min(len(cmd.Args), 5)]
		for i, a := range args {
			args[i] = a[:min(len(a), 40)]
		}
		t.Errorf("Redis spent %v in one command, want at most %v: %s", cmd.Duration, maxCommand, strings.Join(args, " "))
	}
}

// diffSnapshots describes how got differs from want in its sequence, status and
// texts, or returns "": a diff of megabytes of text would be unreadable.
func diffSnapshots(want, got protocol.Snapshot) string {
	switch {
	case got.Sequence != want.Sequence || got.Status != want.Status:
		return fmt.Sprintf("sequence %d, %s; want %d, %s", got.Sequence, got.Status, want.Sequence, want.Status)
	case len(got.Output) != len(want.Output) || len(got.ToolCalls) != len(want.ToolCalls):
		return fmt.Sprintf("%d parts, %d tool calls; want %d, %d", len(got.Output), len(got.ToolCalls), len(want.Output), len(want.ToolCalls))
	}
	for i, p := range want.Output {
		if got.Output[i].Text != p.Text {
			return fmt.Sprintf("part %d has %d bytes of text, want %d, or differs", i, len(got.Output[i].Text), len(p.Text))
		}
	}
	for i, c := range want.ToolCalls {
		if got.ToolCalls[i].Arguments != c.Arguments || got.ToolCalls[i].CallID != c.CallID {
			return fmt.Sprintf("tool call %d has %d bytes of arguments, want %d, or differs", i, len(got.ToolCalls[i].Arguments), len(c.Arguments))
		}
	}
	return ""
}

// diffEvents describes the first difference between want and got, or returns "": a
// diff of events of megabytes would be unreadable.
func diffEvents(want, got []protocol.Event) string {
	if len(want) != len(got) {
		return fmt.Sprintf("%d events, want %d", len(got), len(want))
	}
	for i := range want {
		w, g := want[i], got[i]
		if w.ExecutionID != g.ExecutionID || w.Sequence != g.Sequence || w.Type != g.Type ||
			!w.Timestamp.Equal(g.Timestamp) || !bytes.Equal(w.Data, g.Data) {
			return fmt.Sprintf("event %d is %s %d with %d bytes of data, want %s %d with %d bytes",
				i, g.Type, g.Sequence, len(g.Data), w.Type, w.Sequence, len(w.Data))
		}
	}
	return ""
}

// slowCommands returns the commands of the client named client that Redis logged as
// taking longer than maxCommand while f ran. The slow log is the server's: its
// threshold is set for the call and restored after, and other clients' entries (other
// tests share the server) are left out.
func slowCommands(t *testing.T, admin *goredis.Client, client string, f func()) []goredis.SlowLog {
	t.Helper()
	ctx := context.Background()
	saved, err := admin.ConfigGet(ctx, "slowlog-*").Result()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, k := range []string{"slowlog-log-slower-than", "slowlog-max-len"} {
			if err := admin.ConfigSet(ctx, k, saved[k]).Err(); err != nil {
				t.Errorf("restore %s: %v", k, err)
			}
		}
	}()
	for k, v := range map[string]string{"slowlog-log-slower-than": fmt.Sprint(maxCommand.Microseconds()), "slowlog-max-len": "1024"} {
		if err := admin.ConfigSet(ctx, k, v).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := admin.SlowLogReset(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	f()
	logged, err := admin.SlowLogGet(ctx, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	var mine []goredis.SlowLog
	for _, l := range logged {
		if l.ClientName == client {
			mine = append(mine, l)
		}
	}
	return mine
}
