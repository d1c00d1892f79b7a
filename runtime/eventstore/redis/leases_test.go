package redis_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	redisstore "github.com/switchboard-dev/switchboard/runtime/eventstore/redis"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// TestLeaseScriptsSurviveReplay sends every lease script twice, as go-redis does after
// a lost reply: each must report the success of its first run. Acquire above all: its
// second run finds the lease taken, by itself.
func TestLeaseScriptsSurviveReplay(t *testing.T) {
	ctx := t.Context()
	prefix := newPrefix(t)
	client := newClient(t)
	hook := &replayScripts{}
	client.AddHook(hook)
	s, err := redisstore.NewFromClient(client, redisstore.WithKeyPrefix(prefix), redisstore.WithRetention(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	peer := openPeer(t, prefix) // no replays

	r := eventstore.Reservation{Fingerprint: "sha256:abc", ExecutionID: "exe_leased", CreatedAt: at(0)}
	if _, _, err := peer.Reserve(ctx, "k1", r, time.Hour, 0); err != nil {
		t.Fatal(err)
	}
	rec := eventstore.Record{ID: "exe_leased", CreatedAt: at(0), IdempotencyKey: "k1"}
	lease, err := s.Create(ctx, rec, "replica-a", 100*time.Millisecond)
	if err != nil || lease.Owner != "replica-a" || lease.Fence != eventstore.FirstFence {
		t.Fatalf("Create leased, replayed: %+v, %v; want replica-a's lease with fence 1", lease, err)
	}
	if existing, _, err := peer.Reserve(ctx, "k1", r, time.Hour, 0); err != nil || !existing.Created {
		t.Errorf("Reserve after a replayed Create: %+v, %v; want it Created", existing, err)
	}
	time.Sleep(150 * time.Millisecond)

	taken, err := s.Acquire(ctx, rec.ID, "replica-b", time.Minute)
	if err != nil || taken.Owner != "replica-b" || taken.Fence != lease.Fence+1 {
		t.Fatalf("Acquire, replayed: %+v, %v; want replica-b's lease with fence %d", taken, err, lease.Fence+1)
	}
	if _, err := s.Acquire(ctx, rec.ID, "replica-b", time.Minute); !errors.Is(err, eventstore.ErrLeaseHeld) {
		t.Errorf("another Acquire by the holder, replayed: got %v, want ErrLeaseHeld", err)
	}
	renewed, err := s.Renew(ctx, rec.ID, taken.Fence, time.Hour)
	if err != nil || renewed.Fence != taken.Fence || !renewed.Expires.After(taken.Expires) {
		t.Errorf("Renew, replayed: %+v, %v; want fence %d expiring after %v", renewed, err, taken.Fence, taken.Expires)
	}
	if err := s.SetRemote(ctx, rec.ID, taken.Fence, json.RawMessage(`{"prediction":"p1"}`)); err != nil {
		t.Errorf("SetRemote, replayed: %v", err)
	}
	if err := s.Append(ctx, taken.Fence, event(rec.ID, 1, protocol.EventAccepted, `{}`)); err != nil {
		t.Errorf("Append with a fence, replayed: %v", err)
	}
	if err := s.ReleaseLease(ctx, rec.ID, taken.Fence); err != nil {
		t.Errorf("ReleaseLease, replayed: %v", err)
	}
	st, err := peer.Get(ctx, rec.ID)
	if err != nil || st.Lease.Fence != taken.Fence || st.LastSequence != 1 || string(st.Remote) != `{"prediction":"p1"}` {
		t.Errorf("Get after replayed lease calls: %+v, %v", st, err)
	}
	if ids, err := peer.Orphans(ctx, 0); err != nil || len(ids) != 1 || ids[0] != rec.ID {
		t.Errorf("Orphans after a replayed ReleaseLease: %v, %v; want [%s]", ids, err, rec.ID)
	}
	if hook.replays.Load() == 0 {
		t.Fatal("no script was replayed")
	}
}

// TestOrphanIndexHeals puts the orphan index out of step with the executions in every
// way a lost update (a replica dying between a script and the index update) can, and
// checks that Orphans and Acquire repair it: it is a hint, never the truth.
func TestOrphanIndexHeals(t *testing.T) {
	ctx := t.Context()
	prefix := newPrefix(t)
	s := open(t, prefix)
	admin := newClient(t)
	leases := prefix + "leases"
	file := func(id string, score float64) {
		t.Helper()
		if err := admin.ZAdd(ctx, leases, goredis.Z{Score: score, Member: id}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	score := func(id string) (float64, bool) {
		t.Helper()
		v, err := admin.ZScore(ctx, leases, id).Result()
		if errors.Is(err, goredis.Nil) {
			return 0, false
		}
		if err != nil {
			t.Fatal(err)
		}
		return v, true
	}

	// Created: the index holds the expiry, on this replica's clock within a second of
	// the Redis clock's (the store's tolerance), which a repeated Create (here an hour
	// later) leaves alone.
	held, err := s.Create(ctx, eventstore.Record{ID: "exe_held"}, "replica-a", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, eventstore.Record{ID: "exe_held"}, "replica-a", 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	if got, ok := score("exe_held"); !ok || math.Abs(got-float64(held.Expires.UnixMilli())) > 1000 {
		t.Errorf("score after Create: %v, %v; want %d ± 1000", got, ok, held.Expires.UnixMilli())
	}
	// A creator that died before its script left an entry for nothing; a renewal whose
	// index update was lost left a score that is too early; a terminal append whose
	// removal was lost left an entry for an ended execution; and one for an unleased
	// execution, which no step of the store files, is stale all the same.
	file("exe_never_created", 1)
	file("exe_held", 2)
	ended, err := s.Create(ctx, eventstore.Record{ID: "exe_ended"}, "replica-a", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, ended.Fence, event("exe_ended", 1, protocol.EventFailed, `{}`)); err != nil {
		t.Fatal(err)
	}
	file("exe_ended", 3)
	if _, err := s.Create(ctx, eventstore.Record{ID: "exe_unleased"}, "", 0); err != nil {
		t.Fatal(err)
	}
	file("exe_unleased", 3)
	orphan, err := s.Create(ctx, eventstore.Record{ID: "exe_orphan"}, "replica-a", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseLease(ctx, "exe_orphan", orphan.Fence); err != nil {
		t.Fatal(err)
	}

	ids, err := s.Orphans(ctx, 0)
	if err != nil || len(ids) != 1 || ids[0] != "exe_orphan" {
		t.Errorf("Orphans of a stale index: %v, %v; want [exe_orphan]", ids, err)
	}
	for _, id := range []string{"exe_never_created", "exe_ended", "exe_unleased"} {
		if _, ok := score(id); ok {
			t.Errorf("Orphans left the stale entry of %s", id)
		}
	}
	if got, ok := score("exe_held"); !ok || got != float64(held.Expires.UnixMilli()) {
		t.Errorf("score after Orphans: %v, %v; want the lease's expiry %d", got, ok, held.Expires.UnixMilli())
	}

	// A sweeper that trusted a stale early score: Acquire refuses and scores it right.
	file("exe_held", 4)
	if _, err := s.Acquire(ctx, "exe_held", "replica-b", time.Minute); !errors.Is(err, eventstore.ErrLeaseHeld) {
		t.Fatalf("Acquire of a held lease: got %v, want ErrLeaseHeld", err)
	}
	if got, ok := score("exe_held"); !ok || got != float64(held.Expires.UnixMilli()) {
		t.Errorf("score after a refused Acquire: %v, %v; want the lease's expiry %d", got, ok, held.Expires.UnixMilli())
	}
	file("exe_never_created", 5)
	if _, err := s.Acquire(ctx, "exe_never_created", "replica-b", time.Minute); !errors.Is(err, eventstore.ErrNotFound) {
		t.Fatalf("Acquire of a missing execution: got %v, want ErrNotFound", err)
	}
	if _, ok := score("exe_never_created"); ok {
		t.Error("Acquire left the entry of a missing execution")
	}
}

// TestWaitReplicas appends terminal events to a Redis without replicas, waiting for
// one: WAIT answers 0 after its timeout, and Append still succeeds, since the event is
// recorded, and counts it as under-replicated. Other events are not waited for.
func TestWaitReplicas(t *testing.T) {
	ctx := t.Context()
	prefix := newPrefix(t)
	client := newClient(t)
	waits := &recordWaits{}
	client.AddHook(waits)
	s, err := redisstore.NewFromClient(client, redisstore.WithKeyPrefix(prefix),
		redisstore.WithWaitReplicas(1, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	peer := openPeer(t, prefix)

	lease, err := s.Create(ctx, eventstore.Record{ID: "exe_waited"}, "replica-a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	evs := []protocol.Event{
		event("exe_waited", 1, protocol.EventAccepted, `{}`),
		event("exe_waited", 2, protocol.EventCompleted, `{}`),
	}
	if err := s.Append(ctx, lease.Fence, evs[0]); err != nil {
		t.Fatal(err)
	}
	if n := waits.count(); n != 0 || s.UnderReplicated() != 0 {
		t.Errorf("after a non-terminal event: %d WAITs, %d under-replicated; want none", n, s.UnderReplicated())
	}
	if err := s.Append(ctx, lease.Fence, evs[1]); err != nil {
		t.Fatalf("terminal Append that no replica acknowledged: %v", err)
	}
	if n := waits.count(); n != 1 || s.UnderReplicated() != 1 {
		t.Errorf("after the terminal event: %d WAITs, %d under-replicated; want 1, 1", n, s.UnderReplicated())
	}
	if got, err := peer.Read(ctx, "exe_waited", 0, 0); err != nil || len(got) != 2 {
		t.Errorf("Read after the terminal event: %d events, %v; want 2", len(got), err)
	}
	// A refused terminal event is not waited for.
	if err := s.Append(ctx, lease.Fence, event("exe_waited", 3, protocol.EventFailed, `{}`)); !errors.Is(err, eventstore.ErrTerminated) {
		t.Errorf("Append after the terminal event: got %v, want ErrTerminated", err)
	}
	if n := waits.count(); n != 1 {
		t.Errorf("after a refused terminal event: %d WAITs, want 1", n)
	}

	// Without WithWaitReplicas, or with 0 replicas, nothing waits.
	if _, err := peer.Create(ctx, eventstore.Record{ID: "exe_unwaited"}, "", 0); err != nil {
		t.Fatal(err)
	}
	unwaited, err := redisstore.NewFromClient(client, redisstore.WithKeyPrefix(prefix), redisstore.WithWaitReplicas(0, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unwaited.Close() })
	if err := unwaited.Append(ctx, eventstore.NoFence, event("exe_unwaited", 1, protocol.EventCompleted, `{}`)); err != nil {
		t.Fatal(err)
	}
	if n := waits.count(); n != 1 || unwaited.UnderReplicated() != 0 {
		t.Errorf("with 0 replicas to wait for: %d WAITs in all, %d under-replicated; want 1, 0", n, unwaited.UnderReplicated())
	}
}

// recordWaits is a go-redis hook that counts the WAIT commands sent.
type recordWaits struct{ waits atomic.Int64 }

func (h *recordWaits) count() int64 { return h.waits.Load() }

func (h *recordWaits) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h *recordWaits) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

func (h *recordWaits) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if cmd.Name() == "wait" {
			h.waits.Add(1)
		}
		return next(ctx, cmd)
	}
}
