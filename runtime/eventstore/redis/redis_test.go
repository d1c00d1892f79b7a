package redis_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	goredis "github.com/redis/go-redis/v9"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	redisstore "github.com/switchboard-dev/switchboard/runtime/eventstore/redis"
	"github.com/switchboard-dev/switchboard/runtime/eventstore/storetest"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// retention is short so that the suite's expiry checks run on real time: it checks
// presence at retention/2 and absence at 1.5×retention, leaving 250ms of slack.
const retention = 500 * time.Millisecond

// redisURL is the Redis the tests use. CI starts one, so an unreachable Redis fails the
// tests rather than skipping them.
func redisURL() string {
	if u := os.Getenv("SWITCHBOARD_REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

// newPrefix returns a key prefix of the test's own and deletes its keys when the test
// ends, after the stores registered later are closed.
func newPrefix(tb testing.TB) string {
	tb.Helper()
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		tb.Fatal(err)
	}
	prefix := "switchboard-test:" + hex.EncodeToString(b[:]) + ":"
	admin := newClient(tb)
	tb.Cleanup(func() {
		ctx := context.Background()
		iter := admin.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil {
			tb.Errorf("scan test keys: %v", err)
		}
		if len(keys) > 0 {
			if err := admin.Del(ctx, keys...).Err(); err != nil {
				tb.Errorf("delete test keys: %v", err)
			}
		}
	})
	return prefix
}

// newClient returns a client of the test Redis, failing the test if it does not answer.
func newClient(tb testing.TB, opts ...func(*goredis.Options)) *goredis.Client {
	tb.Helper()
	o, err := goredis.ParseURL(redisURL())
	if err != nil {
		tb.Fatalf("SWITCHBOARD_REDIS_URL: %v", err)
	}
	for _, f := range opts {
		f(o)
	}
	c := goredis.NewClient(o)
	tb.Cleanup(func() { c.Close() })
	if err := c.Ping(context.Background()).Err(); err != nil {
		tb.Fatalf("Redis at %s is unreachable (start redis-server or set SWITCHBOARD_REDIS_URL): %v", redisURL(), err)
	}
	return c
}

// open returns a Store made by New on prefix, closed when the test ends.
func open(tb testing.TB, prefix string, opts ...redisstore.Option) *redisstore.Store {
	tb.Helper()
	opts = append([]redisstore.Option{redisstore.WithKeyPrefix(prefix), redisstore.WithRetention(retention)}, opts...)
	s, err := redisstore.New(context.Background(), redisURL(), opts...)
	if err != nil {
		tb.Fatalf("Redis at %s is unreachable (start redis-server or set SWITCHBOARD_REDIS_URL): %v", redisURL(), err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// openPeer returns a second replica's Store on prefix: its own client, through
// NewFromClient.
func openPeer(tb testing.TB, prefix string) *redisstore.Store {
	tb.Helper()
	s, err := redisstore.NewFromClient(newClient(tb), redisstore.WithKeyPrefix(prefix), redisstore.WithRetention(retention))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// TestConformance runs the suite of every role, each test on a key prefix of its own
// with a second replica's store as the peer.
func TestConformance(t *testing.T) {
	t.Run("Log", func(t *testing.T) {
		t.Parallel()
		storetest.Log(t, harness(func(s *redisstore.Store) eventstore.Log { return s }))
	})
	t.Run("Reservations", func(t *testing.T) {
		t.Parallel()
		storetest.Reservations(t, harness(func(s *redisstore.Store) storetest.ReservationStore {
			return storetest.ReservationStore{Log: s, Reservations: s}
		}))
	})
	t.Run("Cancels", func(t *testing.T) {
		t.Parallel()
		storetest.Cancels(t, harness(func(s *redisstore.Store) storetest.CancelStore {
			return storetest.CancelStore{Log: s, Cancels: s}
		}))
	})
	t.Run("Leases", func(t *testing.T) {
		t.Parallel()
		storetest.Leases(t, harness(func(s *redisstore.Store) storetest.LeaseStore {
			return storetest.LeaseStore{Log: s, Leases: s}
		}))
	})
	t.Run("Secrets", func(t *testing.T) {
		t.Parallel()
		storetest.Secrets(t, harness(func(s *redisstore.Store) eventstore.Secrets { return s }))
	})
	t.Run("Budgets", func(t *testing.T) {
		t.Parallel()
		storetest.Budgets(t, harness(func(s *redisstore.Store) storetest.BudgetStore {
			return storetest.BudgetStore{Budgets: s}
		}))
	})
}

// harness returns the factory of a suite's harnesses: a store on a fresh key prefix and
// a peer on the same prefix, seen as the roles the suite tests (as).
func harness[S any](as func(*redisstore.Store) S) func(t *testing.T) storetest.Harness[S] {
	return func(t *testing.T) storetest.Harness[S] {
		prefix := newPrefix(t)
		s := open(t, prefix)
		return storetest.Harness[S]{
			Store:     as(s),
			Peer:      as(openPeer(t, prefix)),
			Close:     s.Close,
			Retention: retention,
			Advance:   time.Sleep,
		}
	}
}

// TestRefusalsRetainNothing checks that reservations released at once, as refused
// submissions release theirs, leave no key, member or index behind in Redis: the
// memory of the keys under the store's prefix (MEMORY USAGE) is what it was.
func TestRefusalsRetainNothing(t *testing.T) {
	prefix := newPrefix(t)
	admin := newClient(t)
	storetest.CheckRefusals(t, storetest.RefusalConfig{
		Store: open(t, prefix),
		// The measure is exact: one key or set member left behind shows.
		Retained: func() int64 {
			ctx := context.Background()
			var bytes int64
			iter := admin.Scan(ctx, 0, prefix+"*", 1000).Iterator()
			for iter.Next(ctx) {
				n, err := admin.MemoryUsage(ctx, iter.Val()).Result()
				if err != nil && !errors.Is(err, goredis.Nil) {
					t.Fatalf("MEMORY USAGE %s: %v", iter.Val(), err)
				}
				bytes += n
			}
			if err := iter.Err(); err != nil {
				t.Fatalf("scan: %v", err)
			}
			return bytes
		},
	})
}

// TestSurvivesRestart checks that a Store opened after another one closed (a replica
// restart) sees everything the first one wrote.
func TestSurvivesRestart(t *testing.T) {
	ctx := t.Context()
	prefix := newPrefix(t)
	rec := eventstore.Record{ID: "exe_restart", CreatedAt: at(0), Info: json.RawMessage(`{"ability":"chat"}`)}
	evs := []protocol.Event{
		event(rec.ID, 1, protocol.EventAccepted, `{"ability":"chat"}`),
		event(rec.ID, 2, protocol.EventOutputDelta, `{"index":0,"type":"text","text":"hi"}`),
	}
	before := open(t, prefix)
	if _, err := before.Create(ctx, rec, "", 0); err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if err := before.Append(ctx, eventstore.NoFence, ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := before.RequestCancel(ctx, rec.ID); err != nil {
		t.Fatal(err)
	}
	before.Close()

	after := open(t, prefix)
	st, err := after.Get(ctx, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := eventstore.Status{Record: rec, LastSequence: 2, UpdatedAt: evs[1].Timestamp, CancelRequested: true}
	if !st.CreatedAt.Equal(want.CreatedAt) || !st.UpdatedAt.Equal(want.UpdatedAt) || st.LastSequence != 2 ||
		st.Terminal || !st.CancelRequested || string(st.Info) != string(rec.Info) {
		t.Errorf("Get after restart: %+v, want %+v", st, want)
	}
	got, err := after.Read(ctx, rec.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[1].Sequence != 2 || string(got[1].Data) != string(evs[1].Data) {
		t.Errorf("Read after restart: %+v", got)
	}
	if err := after.Append(ctx, eventstore.NoFence, event(rec.ID, 3, protocol.EventFailed, `{}`)); err != nil {
		t.Errorf("Append 3 after restart: %v", err)
	}
}

// TestKeysAndExpiry checks the documented layout: an execution's keys, those of its
// folded status and snapshot included, share its hash tag; a running execution's keys
// all expire at one instant, at least the orphan ttl after its last write (and an
// append moves that instant when it comes nearer), a terminal one's after the
// retention; and a nil payload stays nil.
func TestKeysAndExpiry(t *testing.T) {
	ctx := t.Context()
	prefix := newPrefix(t)
	admin := newClient(t)
	s := open(t, prefix, redisstore.WithRetention(time.Hour), redisstore.WithOrphanTTL(48*time.Hour))
	const id = "exe_keys"
	if _, err := s.Create(ctx, eventstore.Record{ID: id}, "", 0); err != nil {
		t.Fatal(err)
	}
	evs := []protocol.Event{
		{ExecutionID: id, Sequence: 1, Type: protocol.EventAccepted},
		event(id, 2, protocol.EventOutputDelta, `{"index":0,"type":"text","text":"hi"}`),
		event(id, 3, protocol.EventToolCallArgsDelta, `{"call_id":"c1","delta":"{}"}`),
		event(id, 4, protocol.EventToolCallStarted, `{"index":1,"call_id":"c1","name":"f"}`),
		event(id, 5, protocol.EventOutputResult, `{"result":1,"artifacts":[{"uri":"u","media_type":"m"}]}`),
		event(id, 6, protocol.EventUsageReported, `{"usage":[{"unit":"requests","quantity":1,"source":"runtime"}]}`),
	}
	for _, ev := range evs {
		if err := s.Append(ctx, eventstore.NoFence, ev); err != nil {
			t.Fatal(err)
		}
	}
	key := func(name string) string { return prefix + "{" + id + "}:" + name }
	execKeys := []string{key("meta"), key("events"), key("keys"), key("parts"), key("text:0"),
		key("calls"), key("args:1"), key("artifacts"), key("usage")}
	assertKeys := func(want []string) {
		t.Helper()
		keys, err := admin.Keys(ctx, prefix+"*").Result()
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, keys, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
			t.Errorf("keys under the prefix (-want +got):\n%s", diff)
		}
	}
	assertTTL := func(key string, want time.Duration) {
		t.Helper()
		ttl, err := admin.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl <= want-time.Minute || ttl > want {
			t.Errorf("PTTL %s = %v, want about %v", key, ttl, want)
		}
	}
	// Running: one expiry for all, between the orphan ttl and an eighth more from now.
	assertOrphanExpiry := func() {
		t.Helper()
		var first time.Duration
		for i, k := range execKeys {
			at, err := admin.PExpireTime(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			left := time.Until(time.UnixMilli(at.Milliseconds()))
			if i == 0 {
				first = at
			}
			if at != first || left < 48*time.Hour-time.Minute || left > 54*time.Hour {
				t.Errorf("%s expires in %v (at %v), want between 48h and 54h, as %s (at %v)", k, left, at, execKeys[0], first)
			}
		}
	}
	assertKeys(execKeys)
	assertOrphanExpiry()

	// An execution whose expiry comes nearer than the orphan ttl gets a new one, on
	// every key, at its next append. So does one created before orphan_expires existed.
	for _, soon := range []bool{true, false} {
		near := time.Now().Add(47 * time.Hour).UnixMilli()
		for _, k := range execKeys {
			if err := admin.PExpireAt(ctx, k, time.UnixMilli(near)).Err(); err != nil {
				t.Fatal(err)
			}
		}
		var err error
		if soon {
			err = admin.HSet(ctx, key("meta"), "orphan_expires", near).Err()
		} else {
			err = admin.HDel(ctx, key("meta"), "orphan_expires").Err()
		}
		if err != nil {
			t.Fatal(err)
		}
		ev := event(id, uint64(len(evs)+1), protocol.EventProgress, `{"stage":"running"}`)
		if err := s.Append(ctx, eventstore.NoFence, ev); err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
		assertOrphanExpiry()
	}
	// An append while the expiry is far enough leaves it: no expiry command per append.
	far, err := admin.HGet(ctx, key("meta"), "orphan_expires").Int64()
	if err != nil {
		t.Fatal(err)
	}
	ev := event(id, uint64(len(evs)+1), protocol.EventProgress, `{"stage":"running"}`)
	if err := s.Append(ctx, eventstore.NoFence, ev); err != nil {
		t.Fatal(err)
	}
	evs = append(evs, ev)
	for _, k := range execKeys {
		if at, err := admin.PExpireTime(ctx, k).Result(); err != nil || at.Milliseconds() != far {
			t.Errorf("%s expires at %v (%v) after an append, want unchanged at %d ms", k, at, err, far)
		}
	}

	got, err := s.Read(ctx, id, 0, 0)
	if err != nil || len(got) != len(evs) || got[0].Data != nil {
		t.Errorf("Read of an event without data: %+v, %v; want the first event with nil Data", got, err)
	}
	st, err := s.Get(ctx, id)
	if err != nil || st.Info != nil || !st.CreatedAt.IsZero() {
		t.Errorf("Get of a record without info: %+v, %v; want nil Info and zero CreatedAt", st, err)
	}

	end := event(id, uint64(len(evs)+1), protocol.EventCompleted, `{}`)
	if err := s.Append(ctx, eventstore.NoFence, end); err != nil {
		t.Fatal(err)
	}
	for _, k := range execKeys {
		assertTTL(k, time.Hour)
	}
	snap, err := s.Snapshot(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(protocol.Materialize(id, append(evs, end)), snap, cmpopts.IgnoreUnexported(protocol.Snapshot{})); diff != "" {
		t.Errorf("Snapshot (-Materialize +got):\n%s", diff)
	}

	if _, _, err := s.Reserve(ctx, "k1", eventstore.Reservation{Scope: "principal:alice", ExecutionID: id}, time.Minute, 0); err != nil {
		t.Fatal(err)
	}
	// The scope's index lasts as long as its latest reservation.
	assertTTL(prefix+"idem:k1", time.Minute)
	assertTTL(prefix+"idem-scope:principal:alice", time.Minute)
	existing, reserved, err := s.Reserve(ctx, "k1", eventstore.Reservation{ExecutionID: "other"}, time.Minute, 0)
	if err != nil || reserved || existing.ExecutionID != id || existing.Response != nil || existing.Scope != "principal:alice" {
		t.Errorf("Reserve again: %+v, %v, %v; want the first reservation with nil Response", existing, reserved, err)
	}
	if _, _, err := s.Reserve(ctx, "k2", eventstore.Reservation{Scope: "principal:alice", ExecutionID: "exe_k2"}, time.Hour, 0); err != nil {
		t.Fatal(err)
	}
	assertTTL(prefix+"idem-scope:principal:alice", time.Hour)
	if _, _, err := s.Reserve(ctx, "k3", eventstore.Reservation{Scope: "principal:alice", ExecutionID: "exe_k3"}, time.Minute, 0); err != nil {
		t.Fatal(err)
	}
	assertTTL(prefix+"idem-scope:principal:alice", time.Hour)
	assertKeys(append(execKeys, prefix+"idem:k1", prefix+"idem:k2", prefix+"idem:k3", prefix+"idem-scope:principal:alice"))
	for k, id := range map[string]string{"k1": id, "k2": "exe_k2", "k3": "exe_k3"} {
		if err := s.Release(ctx, k, id); err != nil {
			t.Fatal(err)
		}
	}
	assertKeys(execKeys)
}

// TestReservationOfPreviousVersion: a reservation stored by the previous version, which
// stored no scope and kept no index, is replayed and released like any other, during a
// rolling update.
func TestReservationOfPreviousVersion(t *testing.T) {
	ctx := t.Context()
	prefix := newPrefix(t)
	s := open(t, prefix)
	admin := newClient(t)
	if err := admin.HSet(ctx, prefix+"idem:old", "fingerprint", "sha256:abc", "execution_id", "exe_old",
		"created_at", at(0).Format(time.RFC3339Nano)).Err(); err != nil {
		t.Fatal(err)
	}
	want := eventstore.Reservation{Fingerprint: "sha256:abc", ExecutionID: "exe_old", CreatedAt: at(0)}
	got, reserved, err := s.Reserve(ctx, "old", eventstore.Reservation{Scope: "runtime", Fingerprint: "sha256:abc", ExecutionID: "exe_new"}, time.Hour, 1)
	if err != nil || reserved {
		t.Fatalf("Reserve of the old key: reserved %v, %v; want the old reservation", reserved, err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Reserve of the old key (-want +got):\n%s", diff)
	}
	if err := s.Release(ctx, "old", "exe_old"); err != nil {
		t.Fatal(err)
	}
	if n, err := admin.Exists(ctx, prefix+"idem:old").Result(); err != nil || n != 0 {
		t.Errorf("the old reservation after Release: EXISTS %d, %v", n, err)
	}
}

// TestCreateClearsLeftovers checks that a new execution starts empty even if keys of an
// earlier one with its id are left over (they cannot outlive the meta hash, unless an
// eviction policy removes it first): no old events and no old output in its snapshot.
func TestCreateClearsLeftovers(t *testing.T) {
	ctx := t.Context()
	prefix := newPrefix(t)
	admin := newClient(t)
	s := open(t, prefix)
	const id = "exe_leftover"
	if _, err := s.Create(ctx, eventstore.Record{ID: id}, "", 0); err != nil {
		t.Fatal(err)
	}
	for _, ev := range []protocol.Event{
		event(id, 1, protocol.EventOutputDelta, `{"index":0,"text":"old"}`),
		event(id, 2, protocol.EventToolCallArgsDelta, `{"call_id":"c1","delta":"old"}`),
		event(id, 3, protocol.EventUsageReported, `{"usage":[{"unit":"requests","quantity":1,"source":"runtime"}]}`),
	} {
		if err := s.Append(ctx, eventstore.NoFence, ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := admin.Del(ctx, prefix+"{"+id+"}:meta").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, eventstore.Record{ID: id}, "", 0); err != nil {
		t.Fatal(err)
	}
	next := event(id, 1, protocol.EventOutputDelta, `{"index":0,"text":"new"}`)
	if err := s.Append(ctx, eventstore.NoFence, next); err != nil {
		t.Fatal(err)
	}
	snap, err := s.Snapshot(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(protocol.Materialize(id, []protocol.Event{next}), snap, cmpopts.IgnoreUnexported(protocol.Snapshot{})); diff != "" {
		t.Errorf("Snapshot of the new execution (-want +got):\n%s", diff)
	}
}

// TestWaitersSurvivePubSubLoss kills the Store's pub/sub connection under blocked
// waiters: the Store must reconnect and still wake them.
func TestWaitersSurvivePubSubLoss(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	prefix := newPrefix(t)
	s, name := openNamed(t, prefix)
	peer := openPeer(t, prefix)
	admin := newClient(t)

	const id = "exe_reconnect"
	createAccepted(ctx, t, s, id)
	wait := make(chan error, 1)
	go func() { wait <- s.Wait(ctx, id, 1) }()
	waitCancel := make(chan error, 1)
	go func() { waitCancel <- s.WaitCancel(ctx, id) }()

	// Kill the connection once it carries the subscriptions.
	killPubSub(ctx, t, admin, name, 2)
	// Give the Store time to notice and subscribe again on a new connection.
	time.Sleep(100 * time.Millisecond)

	if err := peer.Append(ctx, eventstore.NoFence, event(id, 2, protocol.EventOutputDelta, `{}`)); err != nil {
		t.Fatal(err)
	}
	if err := <-wait; err != nil {
		t.Errorf("Wait after losing pub/sub: %v", err)
	}
	if err := peer.RequestCancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := <-waitCancel; err != nil {
		t.Errorf("WaitCancel after losing pub/sub: %v", err)
	}
}

// TestAnnouncedTailSurvivesPubSubLoss tails an execution as an event stream does (Read,
// Wait, then the events the wake-ups carried) while the Store's connections are killed
// again and again: wake-ups lost meanwhile leave a gap in what the Store holds, which
// must never show as a missing, repeated or altered event.
func TestAnnouncedTailSurvivesPubSubLoss(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	prefix := newPrefix(t)
	s, name := openNamed(t, prefix)
	peer := openPeer(t, prefix)
	admin := newClient(t)

	const id, events = "exe_announced_kills", 300
	if _, err := peer.Create(ctx, eventstore.Record{ID: id}, "", 0); err != nil {
		t.Fatal(err)
	}
	want := make([]protocol.Event, events)
	for i := range want {
		seq := uint64(i + 1)
		want[i] = event(id, seq, protocol.EventOutputDelta, fmt.Sprintf(`{"index":0,"text":"%d\n %d"}`, seq, seq))
		if seq == events {
			want[i] = event(id, seq, protocol.EventCompleted, `{}`)
		}
	}

	var announced atomic.Int64
	tailed := make(chan error, 1)
	go func() {
		var after uint64
		woken := false
		for {
			var evs []protocol.Event
			if woken {
				evs = s.Announced(id, after, 0)
				announced.Add(int64(len(evs)))
			}
			if evs == nil {
				var err error
				if evs, err = s.Read(ctx, id, after, 0); err != nil {
					tailed <- err
					return
				}
			}
			for _, ev := range evs {
				if diff := cmp.Diff(want[after], ev); diff != "" {
					tailed <- fmt.Errorf("after %d (-want +got):\n%s", after, diff)
					return
				}
				after = ev.Sequence
			}
			if after == events {
				tailed <- nil
				return
			}
			if err := s.Wait(ctx, id, after); err != nil {
				tailed <- err
				return
			}
			woken = true
		}
	}()

	for i, ev := range want {
		if err := peer.Append(ctx, eventstore.NoFence, ev); err != nil {
			t.Fatal(err)
		}
		switch {
		case i%50 == 25:
			killPubSub(ctx, t, admin, name, 1)
		case i%5 == 0:
			time.Sleep(2 * time.Millisecond) // let the reader catch up now and then
		}
	}
	if err := <-tailed; err != nil {
		t.Fatal(err)
	}
	if announced.Load() == 0 {
		t.Error("no event came from the wake-ups")
	}
	t.Logf("%d of %d events came from the wake-ups", announced.Load(), events)
}

// What a Store was told on a pub/sub connection it lost is forgotten: Redis may have
// failed over and lost the writes those messages announced, so the announced events are
// read from Redis again.
func TestAnnouncedForgottenWithTheConnection(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	prefix := newPrefix(t)
	s, name := openNamed(t, prefix)
	peer := openPeer(t, prefix)
	admin := newClient(t)
	const id = "exe_announced_forgotten"
	if _, err := peer.Create(ctx, eventstore.Record{ID: id}, "", 0); err != nil {
		t.Fatal(err)
	}
	// Wait until the store is told of event 2 on a live subscription.
	woken := make(chan error, 1)
	go func() { woken <- s.Wait(ctx, id, 1) }()
	for seq := uint64(1); seq <= 2; seq++ {
		if seq == 2 {
			time.Sleep(100 * time.Millisecond) // let the wait subscribe
		}
		if err := peer.Append(ctx, eventstore.NoFence, event(id, seq, protocol.EventOutputDelta, `{"index":0,"text":"x"}`)); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-woken; err != nil {
		t.Fatal(err)
	}
	if s.Announced(id, 1, 0) == nil {
		t.Fatal("event 2 was not announced on a live subscription")
	}
	killPubSub(ctx, t, admin, name, 1)
	for s.Announced(id, 1, 0) != nil {
		if ctx.Err() != nil {
			t.Fatal("the announced events outlived the connection that carried them")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// clientName is a client name unique to the test's key prefix: killPubSub finds the
// connections of a Store by it.
func clientName(prefix string) string {
	return strings.TrimSuffix(strings.ReplaceAll(prefix, ":", "-"), "-")
}

// openNamed opens a Store under prefix whose connections carry clientName(prefix).
func openNamed(t *testing.T, prefix string) (*redisstore.Store, string) {
	t.Helper()
	name := clientName(prefix)
	return open(t, prefix, redisstore.WithClientOptions(func(o *goredis.Options) { o.ClientName = name })), name
}

// openCounting opens a Store under prefix on a client of its own, whose state reads and
// scripts the returned hook counts.
func openCounting(t *testing.T, prefix string) (*redisstore.Store, *countReads) {
	t.Helper()
	client := newClient(t)
	hook := &countReads{}
	client.AddHook(hook)
	s, err := redisstore.NewFromClient(client, redisstore.WithKeyPrefix(prefix), redisstore.WithRetention(retention))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, hook
}

// awaitSubscribed waits until Redis has a subscriber on channel and also (when not
// nil) reports true.
func awaitSubscribed(ctx context.Context, t *testing.T, admin *goredis.Client, channel string, also func() bool) {
	t.Helper()
	for ctx.Err() == nil {
		subs, err := admin.PubSubNumSub(ctx, channel).Result()
		if err != nil {
			t.Fatal(err)
		}
		if subs[channel] == 1 && (also == nil || also()) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no subscriber on %s in time", channel)
}

// killPubSub waits until the connections of the client named name include one
// subscribed to subs channels, then kills every connection of that client (CLIENT
// KILL), pooled ones included.
func killPubSub(ctx context.Context, t *testing.T, admin *goredis.Client, name string, subs int) {
	t.Helper()
	for ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
		list, err := admin.ClientList(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		subscribed := false
		for line := range strings.SplitSeq(list, "\n") {
			if !strings.Contains(line, " name="+name+" ") {
				continue
			}
			subscribed = subscribed || strings.Contains(line, fmt.Sprintf(" sub=%d ", subs))
			clientID, _, _ := strings.Cut(strings.TrimPrefix(line, "id="), " ")
			ids = append(ids, clientID)
		}
		if !subscribed {
			continue
		}
		for _, clientID := range ids {
			if err := admin.Do(ctx, "CLIENT", "KILL", "ID", clientID).Err(); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	t.Fatal("found no pub/sub connection of the Store to kill")
}

// replayScripts is a go-redis hook that runs every script command, and every pipeline,
// twice: once for Redis to act on it, and again as go-redis does when the first reply
// was lost to a read timeout or a broken connection (MaxRetries). The Store only sees
// the reply of the second run.
type replayScripts struct{ replays atomic.Int64 }

func (h *replayScripts) DialHook(next goredis.DialHook) goredis.DialHook { return next }

// ProcessPipelineHook replays a whole pipeline (the Store's pipelined appends), as
// go-redis resends one whose replies were lost.
func (h *replayScripts) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		if err := next(ctx, cmds); err != nil {
			return err
		}
		h.replays.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

func (h *replayScripts) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if name := cmd.Name(); name == "evalsha" || name == "eval" {
			if err := next(ctx, cmd); err != nil {
				return err // not run (NOSCRIPT makes go-redis fall back to EVAL)
			}
			h.replays.Add(1)
		}
		return next(ctx, cmd)
	}
}

// TestScriptsSurviveReplay sends every script twice, as go-redis does after a lost
// reply: Create, Append and Reserve must report the success of their first run and
// store nothing twice, or a lost reply would strand the execution (ErrSequence for an
// event that is stored, ErrTerminated for its own terminal event).
func TestScriptsSurviveReplay(t *testing.T) {
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
	admin := newClient(t)

	rec := eventstore.Record{ID: "exe_replayed", CreatedAt: at(0), Info: json.RawMessage(`{"ability":"chat"}`)}
	if _, err := s.Create(ctx, rec, "", 0); err != nil {
		t.Fatalf("Create, replayed: %v", err)
	}
	bare := eventstore.Record{ID: "exe_replayed_bare"}
	if _, err := s.Create(ctx, bare, "", 0); err != nil {
		t.Fatalf("Create without info, replayed: %v", err)
	}
	if _, err := s.Create(ctx, eventstore.Record{ID: rec.ID, CreatedAt: at(1), Info: rec.Info}, "", 0); !errors.Is(err, eventstore.ErrExists) {
		t.Errorf("Create of another record, replayed: got %v, want ErrExists", err)
	}

	evs := storetest.CompletedExecution(rec.ID)
	evs[0].Data = nil // a payload-less event repeats too
	for _, ev := range evs {
		if err := s.Append(ctx, eventstore.NoFence, ev); err != nil {
			t.Fatalf("Append %d %s, replayed: %v", ev.Sequence, ev.Type, err)
		}
	}
	got, err := peer.Read(ctx, rec.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(evs) {
		t.Fatalf("Read after replayed appends: %d events, want %d", len(got), len(evs))
	}
	for i, ev := range got {
		want := evs[i]
		if ev.Sequence != want.Sequence || ev.Type != want.Type || !ev.Timestamp.Equal(want.Timestamp) ||
			string(ev.Data) != string(want.Data) || (ev.Data == nil) != (want.Data == nil) {
			t.Errorf("event %d after replayed appends: %+v, want %+v", i+1, ev, want)
		}
	}
	if n, err := admin.XLen(ctx, prefix+"{"+rec.ID+"}:events").Result(); err != nil || n != int64(len(evs)) {
		t.Errorf("XLEN after replayed appends: %d, %v; want %d", n, err, len(evs))
	}
	st, err := peer.Get(ctx, rec.ID)
	if err != nil || st.LastSequence != uint64(len(evs)) || !st.Terminal || string(st.Info) != string(rec.Info) {
		t.Errorf("Get after replayed appends: %+v, %v", st, err)
	}
	// The replays folded nothing twice: the text of every delta is there once.
	snap, err := peer.Snapshot(ctx, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(protocol.Materialize(rec.ID, evs), snap, cmpopts.IgnoreUnexported(protocol.Snapshot{})); diff != "" {
		t.Errorf("Snapshot after replayed appends (-Materialize +got):\n%s", diff)
	}
	if st.Attempts != 1 || st.State != protocol.StatusCompleted {
		t.Errorf("Get after replayed appends: attempts %d, state %s; want 1, completed", st.Attempts, st.State)
	}
	// The retention was set by the first run of the terminal append, and only once.
	if ttl, err := admin.PTTL(ctx, prefix+"{"+rec.ID+"}:meta").Result(); err != nil || ttl <= 0 || ttl > time.Hour {
		t.Errorf("PTTL of the terminal execution: %v, %v; want up to 1h", ttl, err)
	}

	// Another event with the last sequence is still refused.
	other := evs[len(evs)-1]
	other.Data = json.RawMessage(`{"finish_reason":"length"}`)
	if err := s.Append(ctx, eventstore.NoFence, other); !errors.Is(err, eventstore.ErrTerminated) {
		t.Errorf("Append of another terminal event, replayed: got %v, want ErrTerminated", err)
	}
	if err := s.Append(ctx, eventstore.NoFence, protocol.Event{ExecutionID: bare.ID, Sequence: 2, Type: protocol.EventAccepted}); !errors.Is(err, eventstore.ErrSequence) {
		t.Errorf("Append out of order, replayed: got %v, want ErrSequence", err)
	}

	r := eventstore.Reservation{Fingerprint: "sha256:abc", ExecutionID: rec.ID, Response: json.RawMessage(`{"id":"exe_replayed"}`), CreatedAt: at(0)}
	existing, reserved, err := s.Reserve(ctx, "k1", r, time.Minute, 0)
	if err != nil || !reserved || existing.ExecutionID != rec.ID || string(existing.Response) != string(r.Response) {
		t.Errorf("Reserve, replayed: %+v, %v, %v; want r, true", existing, reserved, err)
	}
	stranger := r
	stranger.ExecutionID = "exe_stranger"
	existing, reserved, err = s.Reserve(ctx, "k1", stranger, time.Minute, 0)
	if err != nil || reserved || existing.ExecutionID != rec.ID {
		t.Errorf("Reserve by another execution, replayed: %+v, %v, %v; want r, false", existing, reserved, err)
	}

	if err := s.RequestCancel(ctx, bare.ID); err != nil {
		t.Errorf("RequestCancel, replayed: %v", err)
	}
	if err := s.Release(ctx, "k1", rec.ID); err != nil {
		t.Errorf("Release, replayed: %v", err)
	}
	if _, reserved, err := peer.Reserve(ctx, "k1", stranger, time.Minute, 0); err != nil || !reserved {
		t.Errorf("Reserve after a replayed Release: %v, %v; want reserved", reserved, err)
	}
	if hook.replays.Load() == 0 {
		t.Fatal("no script was replayed")
	}
}

// failReads is a go-redis hook that fails the reads of blocked Wait and WaitCancel
// calls (HMGET) while failing is set, as a killed connection or an unreachable Redis
// fails them when go-redis has no retry left.
type failReads struct {
	failing  atomic.Bool
	failures atomic.Int64
}

var errInjected = errors.New("injected: read tcp: connection reset by peer")

func (h *failReads) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h *failReads) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

func (h *failReads) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if h.failing.Load() && cmd.Name() == "hmget" {
			h.failures.Add(1)
			return errInjected
		}
		return next(ctx, cmd)
	}
}

// TestWaitersSurviveFailedReads fails every read of blocked waiters and kills their
// connections meanwhile: Wait and WaitCancel must keep trying, return only when the
// event or the cancel arrives, and otherwise only with their context.
func TestWaitersSurviveFailedReads(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	prefix := newPrefix(t)
	name := clientName(prefix)
	client := newClient(t, func(o *goredis.Options) { o.ClientName = name })
	hook := &failReads{}
	client.AddHook(hook)
	s, err := redisstore.NewFromClient(client, redisstore.WithKeyPrefix(prefix), redisstore.WithRetention(retention))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	peer := openPeer(t, prefix)
	admin := newClient(t)

	const id = "exe_failed_reads"
	createAccepted(ctx, t, s, id)

	hook.failing.Store(true)
	wait := make(chan error, 1)
	go func() { wait <- s.Wait(ctx, id, 1) }()
	waitCancel := make(chan error, 1)
	go func() { waitCancel <- s.WaitCancel(ctx, id) }()
	// Let both retry a few times, then kill the Store's connections as well.
	blocked := func() {
		t.Helper()
		select {
		case err := <-wait:
			t.Fatalf("Wait returned %v while reads failed, want it blocked", err)
		case err := <-waitCancel:
			t.Fatalf("WaitCancel returned %v while reads failed, want it blocked", err)
		default:
		}
	}
	for hook.failures.Load() < 8 && ctx.Err() == nil {
		blocked()
		time.Sleep(10 * time.Millisecond)
	}
	killPubSub(ctx, t, admin, name, 2)
	time.Sleep(100 * time.Millisecond)
	blocked()

	// Until its context ends, then a waiter returns the context's error, not Redis's.
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	if err := s.WaitCancel(short, id); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitCancel while reads fail: got %v, want context.DeadlineExceeded", err)
	}
	if err := s.Wait(short, id, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait while reads fail: got %v, want context.DeadlineExceeded", err)
	}

	hook.failing.Store(false)
	if err := peer.Append(ctx, eventstore.NoFence, event(id, 2, protocol.EventOutputDelta, `{}`)); err != nil {
		t.Fatal(err)
	}
	if err := <-wait; err != nil {
		t.Errorf("Wait after failed reads: %v", err)
	}
	if err := peer.RequestCancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := <-waitCancel; err != nil {
		t.Errorf("WaitCancel after failed reads: %v", err)
	}
	if err := s.Append(ctx, eventstore.NoFence, event(id, 3, protocol.EventFailed, `{}`)); err != nil {
		t.Fatal(err)
	}
	// A terminal execution still ends a waiter whose first reads failed.
	hook.failing.Store(true)
	ended := make(chan error, 1)
	go func() { ended <- s.Wait(ctx, id, 3) }()
	for n := hook.failures.Load(); hook.failures.Load() < n+2 && ctx.Err() == nil; {
		time.Sleep(10 * time.Millisecond)
	}
	hook.failing.Store(false)
	if err := <-ended; !errors.Is(err, eventstore.ErrTerminated) {
		t.Errorf("Wait on a terminal execution after failed reads: got %v, want ErrTerminated", err)
	}
}

func TestConstructors(t *testing.T) {
	ctx := t.Context()
	if _, err := redisstore.New(ctx, "redis://127.0.0.1:1/0", redisstore.WithClientOptions(func(o *goredis.Options) {
		o.MaxRetries, o.DialerRetries = -1, 1
	})); err == nil {
		t.Error("New with an unreachable Redis: no error")
	}
	if _, err := redisstore.New(ctx, "http://localhost"); err == nil {
		t.Error("New with a bad url: no error")
	}
	client := newClient(t)
	if _, err := redisstore.NewFromClient(client, redisstore.WithKeyPrefix("a{b}:")); !errors.Is(err, eventstore.ErrInvalid) {
		t.Errorf("NewFromClient with braces in the prefix: got %v, want ErrInvalid", err)
	}
	s, err := redisstore.NewFromClient(client, redisstore.WithKeyPrefix(newPrefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := client.Ping(ctx).Err(); err != nil {
		t.Errorf("Close closed a client it does not own: %v", err)
	}
}

func at(ms int) time.Time {
	return time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC).Add(time.Duration(ms) * time.Millisecond)
}

func event(id string, seq uint64, typ protocol.EventType, data string) protocol.Event {
	return protocol.Event{ExecutionID: id, Sequence: seq, Timestamp: at(int(seq)), Type: typ, Data: json.RawMessage(data)}
}

// createAccepted creates execution id in s, without a lease, and appends its
// execution.accepted.
func createAccepted(ctx context.Context, t *testing.T, s *redisstore.Store, id string) {
	t.Helper()
	if _, err := s.Create(ctx, eventstore.Record{ID: id}, "", 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, eventstore.NoFence, event(id, 1, protocol.EventAccepted, `{}`)); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkAppend measures one execution appending alone, with and without the append
// pipeline: alone, a pipeline carries one append, and the difference is the hand-off to
// its worker.
func BenchmarkAppend(b *testing.B) {
	for _, mode := range appendModes {
		b.Run(mode.name, func(b *testing.B) {
			// A short retention lets ended executions expire, so Redis does not grow with b.N.
			opts := append([]redisstore.Option{redisstore.WithRetention(time.Second)}, mode.opts...)
			storetest.BenchmarkAppend(b, open(b, newPrefix(b), opts...), nil)
		})
	}
}

// appendModes are the two ways a Store sends appends, compared in one run.
var appendModes = []struct {
	name string
	opts []redisstore.Option
}{
	{"sequential", []redisstore.Option{redisstore.WithSequentialAppends()}},
	{"pipelined", nil},
}

func BenchmarkRead20(b *testing.B) {
	storetest.BenchmarkRead20(b, open(b, newPrefix(b), redisstore.WithRetention(time.Hour)))
}

func BenchmarkStatusAndResult(b *testing.B) {
	storetest.BenchmarkStatusAndResult(b, open(b, newPrefix(b), redisstore.WithRetention(time.Hour)))
}

func BenchmarkRenew(b *testing.B) {
	s := open(b, newPrefix(b), redisstore.WithRetention(time.Hour))
	storetest.BenchmarkRenew(b, storetest.LeaseStore{Log: s, Leases: s})
}

func BenchmarkOrphans(b *testing.B) {
	s := open(b, newPrefix(b), redisstore.WithRetention(time.Hour))
	storetest.BenchmarkOrphans(b, storetest.LeaseStore{Log: s, Leases: s})
}

// BenchmarkConcurrentAppend compares, in one run, appends sent each on its own round
// trip with the append pipeline (group commit across executions), at 32 concurrent
// executions: the ns/op ratio of the two sub-benchmarks is the pipeline's gain.
func BenchmarkConcurrentAppend(b *testing.B) {
	for _, mode := range appendModes {
		b.Run(mode.name, func(b *testing.B) {
			opts := append([]redisstore.Option{redisstore.WithRetention(time.Second)}, mode.opts...)
			storetest.BenchmarkConcurrentAppend(b, open(b, newPrefix(b), opts...), 16)
		})
	}
}

// countReads counts the state reads (HMGET) of waiters, and the event reads (XRANGE, in
// the transactions of Read).
type countReads struct{ reads, ranges atomic.Int64 }

func (h *countReads) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h *countReads) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		for _, cmd := range cmds {
			if cmd.Name() == "xrange" {
				h.ranges.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

func (h *countReads) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if cmd.Name() == "hmget" {
			h.reads.Add(1)
		}
		return next(ctx, cmd)
	}
}

// A reader tailing an execution on a subscription that stays live waits for each next
// event without reading the execution's state: the wake-up of the event it has read
// tells it that nothing newer exists yet. The wake-up carries the event, which Announced
// then returns without a Read. The terminal event's wake-up says it is the terminal
// one, so a wait past it still reads the state and returns ErrTerminated at once rather
// than at the next recheck.
func TestLiveTailWaitsWithoutReads(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	prefix := newPrefix(t)
	s, hook := openCounting(t, prefix)
	peer := openPeer(t, prefix)

	const id, events = "exe_live_tail", 40
	createAccepted(ctx, t, peer, id)
	// The first wait subscribes; the next event is appended once Redis has the
	// subscription, so that every later wait finds it live.
	first := make(chan error, 1)
	go func() { first <- s.Wait(ctx, id, 1) }()
	awaitSubscribed(ctx, t, newClient(t), prefix+"{"+id+"}:wake", nil)
	unannounced := 0
	for seq := uint64(2); seq <= events; seq++ {
		typ, data := protocol.EventOutputDelta, `{"index":0,"text":"x y\nz"}`
		switch seq {
		case events:
			typ, data = protocol.EventCompleted, `{}`
		case events - 1:
			typ, data = protocol.EventProgress, "" // no data at all
		}
		wait := first
		if seq > 2 {
			wait = make(chan error, 1)
			go func() { wait <- s.Wait(ctx, id, seq-1) }()
		}
		ev := event(id, seq, typ, data)
		if data == "" {
			ev.Data = nil
		}
		if err := peer.Append(ctx, eventstore.NoFence, ev); err != nil {
			t.Fatal(err)
		}
		if err := <-wait; err != nil {
			t.Fatalf("Wait after %d: %v", seq-1, err)
		}
		got := s.Announced(id, seq-1, 0)
		if got == nil {
			unannounced++ // a wait answered by a read, before its wake-up came
			continue
		}
		if diff := cmp.Diff([]protocol.Event{ev}, got); diff != "" {
			t.Errorf("Announced after %d (-want +got):\n%s", seq-1, diff)
		}
	}
	if unannounced > 2 || hook.ranges.Load() > 0 {
		t.Errorf("%d of %d waits were followed by events the wake-ups did not carry, %d Reads; want at most 2 and none",
			unannounced, events-1, hook.ranges.Load())
	}
	// Subscribing costs a read before and one after the subscription is live, and the
	// second wait one more if it starts before the wake-up of the event the first read
	// itself; every later wait is answered by wake-ups alone.
	if n := hook.reads.Load(); n > 3 {
		t.Errorf("%d state reads for %d waits, want at most 3", n, events-1)
	}

	// Well within the recheck interval (2s), which would otherwise answer it.
	short, cancelShort := context.WithTimeout(ctx, time.Second)
	defer cancelShort()
	if err := s.Wait(short, id, events); !errors.Is(err, eventstore.ErrTerminated) {
		t.Errorf("Wait past the terminal event = %v, want ErrTerminated", err)
	}
}

// TestFirstWaitReadsOnce: a stream's first Wait on an execution reads its state once,
// when its subscription is live, whether the answer is stored already or comes later.
func TestFirstWaitReadsOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	prefix := newPrefix(t)
	s, hook := openCounting(t, prefix)
	peer := openPeer(t, prefix)
	admin := newClient(t)

	for _, stored := range []bool{true, false} {
		t.Run(fmt.Sprintf("stored=%v", stored), func(t *testing.T) {
			id := fmt.Sprintf("exe_first_wait_%v", stored)
			createAccepted(ctx, t, peer, id)
			after := uint64(1)
			if stored {
				after = 0
			}
			before := hook.reads.Load()
			done := make(chan error, 1)
			go func() { done <- s.Wait(ctx, id, after) }()
			if !stored {
				awaitSubscribed(ctx, t, admin, prefix+"{"+id+"}:wake", func() bool { return hook.reads.Load() > before })
				if err := peer.Append(ctx, eventstore.NoFence, event(id, 2, protocol.EventOutputDelta, `{"index":0,"text":"x"}`)); err != nil {
					t.Fatal(err)
				}
			}
			if err := <-done; err != nil {
				t.Fatalf("Wait = %v", err)
			}
			if n := hook.reads.Load() - before; n != 1 {
				t.Errorf("%d state reads, want 1", n)
			}
		})
	}
}

// WaitCancel reads the execution's state once, when its subscription is live; the
// cancel request's message, or the terminal event's, is the answer without another
// read: "cancel" also when the execution ends after a cancel was requested.
func TestWaitCancelReadsOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	prefix := newPrefix(t)
	s, hook := openCounting(t, prefix)
	peer := openPeer(t, prefix)
	admin := newClient(t)

	for _, tc := range []struct {
		name        string
		cancel, end bool
		want        error
	}{
		{name: "terminal", end: true, want: eventstore.ErrTerminated},
		{name: "cancel", cancel: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "exe_wait_cancel_" + strings.ReplaceAll(tc.name, " ", "_")
			if _, err := peer.Create(ctx, eventstore.Record{ID: id}, "", 0); err != nil {
				t.Fatal(err)
			}
			before := hook.reads.Load()
			done := make(chan error, 1)
			go func() { done <- s.WaitCancel(ctx, id) }()
			// Subscribed, and the read made once the subscription is live is done.
			awaitSubscribed(ctx, t, admin, prefix+"{"+id+"}:cancel", func() bool { return hook.reads.Load() > before })
			if tc.cancel {
				if err := peer.RequestCancel(ctx, id); err != nil {
					t.Fatal(err)
				}
			}
			if tc.end {
				if err := peer.Append(ctx, eventstore.NoFence, event(id, 1, protocol.EventFailed, `{}`)); err != nil {
					t.Fatal(err)
				}
			}
			if err := <-done; !errors.Is(err, tc.want) {
				t.Errorf("WaitCancel = %v, want %v", err, tc.want)
			}
			if n := hook.reads.Load() - before; n != 1 {
				t.Errorf("%d state reads, want 1", n)
			}
		})
	}

	// The terminal event of an execution whose cancel was requested (perhaps before a
	// WaitCancel subscribed) says "cancel": WaitCancel's answer then.
	const id = "exe_wait_cancel_cancelled_then_ended"
	if _, err := peer.Create(ctx, eventstore.Record{ID: id}, "", 0); err != nil {
		t.Fatal(err)
	}
	if err := peer.RequestCancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	sub := admin.Subscribe(ctx, prefix+"{"+id+"}:cancel")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil { // the confirmation
		t.Fatal(err)
	}
	if err := peer.Append(ctx, eventstore.NoFence, event(id, 1, protocol.EventFailed, `{}`)); err != nil {
		t.Fatal(err)
	}
	if msg, err := sub.ReceiveMessage(ctx); err != nil || msg.Payload != "cancel" {
		t.Errorf("terminal event of a cancelled execution published %v (%v), want cancel", msg, err)
	}
}

// An event larger than a wake-up carries (64 KiB of data) is announced by its sequence
// alone, and read from Redis; the events after it are carried again.
func TestLargeEventsAreNotCarried(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	prefix := newPrefix(t)
	s := open(t, prefix)
	peer := openPeer(t, prefix)
	const id = "exe_large_event"
	if _, err := peer.Create(ctx, eventstore.Record{ID: id}, "", 0); err != nil {
		t.Fatal(err)
	}
	large := `{"index":0,"text":"` + strings.Repeat("x", 64<<10) + `"}`
	evs := []protocol.Event{
		event(id, 1, protocol.EventAccepted, `{}`),
		event(id, 2, protocol.EventOutputDelta, `{"index":0,"text":"small"}`),
		event(id, 3, protocol.EventOutputDelta, large),
		event(id, 4, protocol.EventOutputDelta, `{"index":0,"text":"small again"}`),
	}
	if err := peer.Append(ctx, eventstore.NoFence, evs[0]); err != nil {
		t.Fatal(err)
	}
	// A first wait subscribes; once it returns for event 2 the subscription is live,
	// and every later append is announced on it.
	for i, ev := range evs[1:] {
		after := uint64(i + 1)
		woken := make(chan error, 1)
		go func() { woken <- s.Wait(ctx, id, after) }()
		if i == 0 {
			time.Sleep(100 * time.Millisecond) // let the first wait subscribe
		}
		if err := peer.Append(ctx, eventstore.NoFence, ev); err != nil {
			t.Fatal(err)
		}
		if err := <-woken; err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			continue // its wake-up may have come before the subscription was live
		}
		got := s.Announced(id, after, 0)
		switch {
		case ev.Sequence == 3 && got != nil:
			t.Errorf("Announced the large event: %d events", len(got))
		case ev.Sequence == 4:
			if diff := cmp.Diff([]protocol.Event{ev}, got); diff != "" {
				t.Errorf("Announced after the large event (-want +got):\n%s", diff)
			}
		}
	}
	got, err := s.Read(ctx, id, 2, 1)
	if err != nil || len(got) != 1 || string(got[0].Data) != large {
		t.Errorf("Read of the large event: %d events, %v", len(got), err)
	}
}

// A Redis that lost its script cache (a restart, SCRIPT FLUSH) answers the pipelined
// EVALSHA of Create and Append with NOSCRIPT: both run their script again with EVAL.
func TestScriptCacheFlushed(t *testing.T) {
	ctx := t.Context()
	prefix := newPrefix(t)
	s := open(t, prefix)
	admin := newClient(t)
	const id = "exe_script_flush"
	for _, leased := range []bool{true, false} {
		id := fmt.Sprintf("%s_%t", id, leased)
		if err := admin.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		owner, ttl := "", time.Duration(0)
		if leased {
			owner, ttl = "replica-a", time.Minute
		}
		lease, err := s.Create(ctx, eventstore.Record{ID: id}, owner, ttl)
		if err != nil {
			t.Fatalf("Create after SCRIPT FLUSH: %v", err)
		}
		if err := admin.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		ev := event(id, 1, protocol.EventOutputDelta, `{"index":0,"text":"x"}`)
		if err := s.Append(ctx, lease.Fence, ev); err != nil {
			t.Fatalf("Append after SCRIPT FLUSH: %v", err)
		}
		got, err := s.Read(ctx, id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]protocol.Event{ev}, got); diff != "" {
			t.Errorf("Read (-want +got):\n%s", diff)
		}
	}
}
