package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
)

// hub is the Store's waiters, by execution id: each id that someone waits on has one
// channel, closed (and replaced) when a wake-up names the id, so that every waiter of
// it reads the table again. A wake-up is only a hint, never the answer.
type hub struct {
	mu    sync.Mutex
	execs map[string]*watch
}

// watch is the wake-up channel of one execution and how many calls wait on it.
type watch struct {
	waiters int
	ch      chan struct{}
}

func newHub() *hub {
	return &hub{execs: map[string]*watch{}}
}

// join registers a waiter of id.
func (h *hub) join(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := h.execs[id]
	if w == nil {
		w = &watch{ch: make(chan struct{})}
		h.execs[id] = w
	}
	w.waiters++
}

// leave unregisters a waiter of id; the last one forgets the id.
func (h *hub) leave(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if w := h.execs[id]; w != nil {
		if w.waiters--; w.waiters == 0 {
			delete(h.execs, id)
		}
	}
}

// channel returns the channel the next wake-up of id closes. A waiter takes it before
// it reads the table, so that a wake-up sent after the read is never missed.
func (h *hub) channel(id string) <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.execs[id].ch
}

// wake wakes the waiters of id.
func (h *hub) wake(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if w := h.execs[id]; w != nil {
		close(w.ch)
		w.ch = make(chan struct{})
	}
}

// wakeAll wakes every waiter: after the listener reconnected, wake-ups may have been
// lost.
func (h *hub) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, w := range h.execs {
		close(w.ch)
		w.ch = make(chan struct{})
	}
}

// listen opens the listening connection, from the pool's configuration but outside
// the pool, so that it never holds a pooled connection, and LISTENs on the channel.
func (s *Store) listen(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, dbError("listen for wake-ups", err)
	}
	if _, err := conn.Exec(ctx, `LISTEN "`+s.channel+`"`); err != nil {
		_ = conn.Close(context.Background())
		return nil, dbError("listen for wake-ups", err)
	}
	return conn, nil
}

// listenLoop hands the notifications of conn to the hub until ctx ends, reconnecting
// after a failure with a growing pause; after each reconnection it wakes every waiter,
// since notifications sent meanwhile were lost.
func (s *Store) listenLoop(ctx context.Context, conn *pgx.Conn) {
	failures := 0
	for {
		if conn == nil {
			c, err := s.listen(ctx)
			if err != nil {
				failures++
				if !sleep(ctx, backoff(failures)) {
					return
				}
				continue
			}
			conn, failures = c, 0
			s.hub.wakeAll()
		}
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			_ = conn.Close(context.Background())
			conn = nil
			if ctx.Err() != nil {
				return
			}
			continue
		}
		s.notified(n)
	}
}

// notified wakes the waiters of the execution a notification names: its payload is
// "<id>:<what>" (the sequence appended, "cancel" or "removed").
func (s *Store) notified(n *pgconn.Notification) {
	if i := strings.LastIndexByte(n.Payload, ':'); i > 0 {
		s.hub.wake(n.Payload[:i])
	}
}

// backoff is the pause after the given number of consecutive failures.
func backoff(failures int) time.Duration {
	return min(retryBackoff<<min(failures-1, 10), maxBackoff)
}

// sleep pauses for d, reporting false if ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Wait implements eventstore.Log.
func (s *Store) Wait(ctx context.Context, id string, after uint64) error {
	if s.isClosed.Load() {
		return eventstore.ErrClosed
	}
	return s.block(ctx, id, func(ctx context.Context) (bool, error) {
		var (
			last     int64
			terminal bool
		)
		err := s.pool.QueryRow(ctx, s.sql(`SELECT e.last_seq, e.terminal FROM {s}.executions e WHERE e.id = $1 AND `+live), id).
			Scan(&last, &terminal)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return true, notFound(id)
		case err != nil:
			return false, err
		case uint64(last) > after:
			return true, nil
		case terminal:
			return true, fmt.Errorf("wait on %s after %d: %w", id, after, eventstore.ErrTerminated)
		}
		return false, nil
	})
}

// RequestCancel implements eventstore.Cancels: one statement records the request and
// sends the wake-up, delivered when it commits.
func (s *Store) RequestCancel(ctx context.Context, id string) error {
	if s.isClosed.Load() {
		return eventstore.ErrClosed
	}
	if !storable(id) {
		return notFound(id)
	}
	tag, err := s.pool.Exec(ctx, s.sql(`
		WITH c AS (UPDATE {s}.executions e SET cancel_requested = true
			WHERE e.id = $1 AND NOT e.terminal AND `+live+` RETURNING e.id)
		SELECT pg_notify($2, id || ':cancel') FROM c`), id, s.channel)
	if err != nil {
		return s.fail(err, "cancel %s", id)
	}
	if tag.RowsAffected() > 0 {
		return nil
	}
	var terminal bool
	err = s.pool.QueryRow(ctx, s.sql(`SELECT e.terminal FROM {s}.executions e WHERE e.id = $1 AND `+live), id).Scan(&terminal)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return notFound(id)
	case err != nil:
		return s.fail(err, "cancel %s", id)
	}
	return fmt.Errorf("cancel %s: %w", id, eventstore.ErrTerminated)
}

// WaitCancel implements eventstore.Cancels. The terminal event's wake-up ends it too.
func (s *Store) WaitCancel(ctx context.Context, id string) error {
	if s.isClosed.Load() {
		return eventstore.ErrClosed
	}
	return s.block(ctx, id, func(ctx context.Context) (bool, error) {
		var cancelled, terminal bool
		err := s.pool.QueryRow(ctx, s.sql(`SELECT e.cancel_requested, e.terminal FROM {s}.executions e WHERE e.id = $1 AND `+live), id).
			Scan(&cancelled, &terminal)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return true, notFound(id)
		case err != nil:
			return false, err
		case cancelled:
			return true, nil
		case terminal:
			return true, fmt.Errorf("wait for cancel of %s: %w", id, eventstore.ErrTerminated)
		}
		return false, nil
	})
}

// block waits until check, a read of the table, reports done: it reads once
// registered, after every wake-up of id and every recheckInterval. A failed read is
// retried after a pause that grows with consecutive failures, so that a lost
// connection or a database restarting for a moment never ends a wait: block returns
// only check's answer, ctx.Err() or ErrClosed.
func (s *Store) block(ctx context.Context, id string, check func(context.Context) (bool, error)) error {
	if !storable(id) {
		return notFound(id)
	}
	s.hub.join(id)
	defer s.hub.leave(id)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	failures := 0
	for {
		wake := s.hub.channel(id)
		done, err := check(ctx)
		switch {
		case done:
			return err
		case ctx.Err() != nil:
			return ctx.Err()
		case s.isClosed.Load():
			return eventstore.ErrClosed
		}
		pause := recheckInterval
		if err != nil {
			failures++
			pause = backoff(failures)
			wake = nil // the next read is the one that can tell
		} else {
			failures = 0
		}
		if timer == nil {
			timer = time.NewTimer(pause)
		} else {
			timer.Reset(pause)
		}
		select {
		case <-wake:
		case <-timer.C: // Reset gets it ready again: timers since Go 1.23 keep no stale tick
		case <-ctx.Done():
			return ctx.Err()
		case <-s.closed:
			return eventstore.ErrClosed
		}
	}
}
