package redis

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

const (
	// linger is how long a channel nobody waits on stays subscribed. A reader tailing an
	// execution leaves and rejoins its channel between events; lingering spares it a
	// SUBSCRIBE round trip (and Redis the churn) each time.
	linger = 10 * time.Second
	// healthInterval is how long the pub/sub connection may stay silent before it is
	// pinged; a second silent interval counts as a dead connection.
	healthInterval = 5 * time.Second
	// commandTimeout bounds one SUBSCRIBE, UNSUBSCRIBE or PING.
	commandTimeout = 5 * time.Second
	// maxBackoff bounds the pause between attempts to reconnect to an unreachable Redis.
	maxBackoff = 2 * time.Second

	// A topic keeps the events its latest wake-ups carried, for readers catching up
	// (announced): at most tailEvents of them and tailBytes of payloads, and all topics
	// together at most hubTailBytes. A tailing reader is rarely more than a few events
	// behind; one further behind reads from Redis.
	tailEvents   = 64
	tailBytes    = 256 << 10
	hubTailBytes = 64 << 20
)

// hub carries the wake-ups of every blocked Wait and WaitCancel of one Store over a
// single pub/sub connection, whatever the number of waiters. Blocking each waiter in
// its own XREAD BLOCK would hold one pooled connection per waiter (an SSE stream is a
// waiter) and could not be interrupted when its context ends.
//
// Each execution has two channels, one announcing appends (the sequence, marked when it
// is the terminal event's, and the event itself) and one announcing cancel requests and
// the terminal event; a channel is subscribed while someone waits on it (and for linger
// after). A message is published by the script that wrote what it announces, so it is a
// fact about the stored state; but messages can be lost (a reconnect), so a waiter that
// has not been told what it waits for reads the state from the execution's keys, and a
// lost message costs latency, never correctness. A waiter checks the state only after
// its subscription is confirmed, so nothing published after the check can pass it by;
// and while the subscription stays up nothing can be lost, so a reader whose cursor is at
// or past the sequence the latest message announced need not read the state before
// waiting (a topic is current). The events the latest messages carried are kept (the
// topic's tail), so that a reader woken by one takes it from there rather than from
// Redis (announced).
//
// When the connection fails (an error, or no answer to a ping), the hub replaces it
// with a new PubSub and subscribes again to every channel with waiters; each
// confirmation wakes that channel's waiters, which then re-read the state they might
// have missed meanwhile. What the old connection delivered is forgotten, since a
// failover may have lost writes it announced. Waiters also re-read the state every
// recheckInterval, which bounds the delay while Redis is unreachable.
type hub struct {
	client goredis.UniversalClient
	done   <-chan struct{}
	kick   chan struct{} // wakes manage to (un)subscribe
	wg     sync.WaitGroup

	mu     sync.Mutex
	ps     *goredis.PubSub // the current connection
	closed bool            // no new connection may be made
	topics map[string]*topic
	// wanted holds the channels joined since the last sync while not subscribed, so
	// that a join costs a look at its own channel, not at every topic; resync asks for
	// a look at every topic (after a reconnect).
	wanted map[string]struct{}
	resync bool
	// tailBytes is the size of the payloads all topics' tails hold.
	tailBytes int
}

// topic is one channel and its local waiters. Its fields are guarded by hub.mu.
type topic struct {
	refs int // waiters that joined and have not left
	// subscribed: a SUBSCRIBE was sent on the current connection (and no UNSUBSCRIBE
	// since). pending counts those not yet confirmed: the channel is live only when
	// subscribed and pending is 0.
	subscribed bool
	pending    int
	ready      chan struct{} // closed once live; replaced when the connection is
	isReady    bool
	wake       chan struct{} // closed (and forgotten) on the next message or confirmation
	messages   uint64        // messages received, so waiters can tell fresh news from old
	last       uint64        // the sequence the latest message announced (wake channels)
	// current: the latest message announced a sequence that is not the terminal event's,
	// and the subscription has been live since, so no later message can have been lost.
	current bool
	// kind is the latest message's kind: "event" or "terminal" on a wake channel (empty
	// from a replica that sends only the sequence), "cancel" or "terminal" on a cancel
	// channel.
	kind string
	// tail holds the events the latest messages of a wake channel carried, consecutive
	// sequences in order; tailBytes is the size of their payloads.
	tail      []announcement
	tailBytes int
	idleSince time.Time // when refs last dropped to 0
}

// announcement is an event a wake-up carried: its sequence, and the rest of the stored
// event as the append script formats it (type, timestamp, has-data flag and data).
type announcement struct {
	seq   uint64
	event string
}

// news is what a topic has received, for a waiter to decide whether to read the state.
type news struct {
	messages, last uint64
	current        bool
	kind           string
}

func newHub(client goredis.UniversalClient, done <-chan struct{}) *hub {
	h := &hub{
		client: client,
		done:   done,
		kick:   make(chan struct{}, 1),
		ps:     client.Subscribe(context.Background()),
		topics: make(map[string]*topic),
		wanted: make(map[string]struct{}),
	}
	h.wg.Go(h.receive)
	h.wg.Go(h.manage)
	return h
}

// close closes the connection and waits for the hub's goroutines. The caller has
// closed done first.
func (h *hub) close() {
	h.mu.Lock()
	h.closed = true
	ps := h.ps
	h.mu.Unlock()
	_ = ps.Close()
	h.wg.Wait()
}

// join registers a waiter on channel and returns its topic; the caller must leave it.
func (h *hub) join(channel string) *topic {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.topics[channel]
	if t == nil {
		t = &topic{ready: make(chan struct{})}
		h.topics[channel] = t
	}
	t.refs++
	if !t.subscribed {
		h.wanted[channel] = struct{}{}
		h.poke()
	}
	return t
}

// leave undoes join. The subscription lingers; manage ends it later.
func (h *hub) leave(t *topic) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t.refs--
	if t.refs == 0 {
		t.idleSince = time.Now()
	}
}

// readyChan returns a channel closed once t's subscription is live, and whether it is
// live already.
func (h *hub) readyChan(t *topic) (<-chan struct{}, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return t.ready, t.isReady
}

// watch returns a channel closed at t's next message or confirmation, and what t has
// received so far.
func (h *hub) watch(t *topic) (wake <-chan struct{}, n news) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t.wake == nil {
		t.wake = make(chan struct{})
	}
	return t.wake, news{messages: t.messages, last: t.last, current: t.current, kind: t.kind}
}

// announced returns the events after `after` in channel's tail, at most limit of them
// (limit <= 0: all), or nil when the tail does not hold the event after `after`.
func (h *hub) announced(channel string, after uint64, limit int) []announcement {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.topics[channel]
	if t == nil || len(t.tail) == 0 || after+1 < t.tail[0].seq || after >= t.tail[len(t.tail)-1].seq {
		return nil
	}
	tail := t.tail[after+1-t.tail[0].seq:]
	if limit > 0 && len(tail) > limit {
		tail = tail[:limit]
	}
	// A copy: the tail's array is shifted in place as events come.
	return append([]announcement(nil), tail...)
}

// remember adds the event a wake-up of t carried to its tail. A sequence that does not
// follow the tail's last (messages were lost) starts the tail again. Called with hub.mu
// held.
func (h *hub) remember(t *topic, seq uint64, event string) {
	if n := len(t.tail); n > 0 && t.tail[n-1].seq+1 != seq {
		h.forget(t, n)
	}
	if len(event) > tailBytes || h.tailBytes+len(event) > hubTailBytes {
		h.forget(t, len(t.tail)) // kept without a gap or not at all
		return
	}
	t.tail = append(t.tail, announcement{seq: seq, event: event})
	t.tailBytes += len(event)
	h.tailBytes += len(event)
	drop := 0
	for size := t.tailBytes; len(t.tail)-drop > tailEvents || size > tailBytes; drop++ {
		size -= len(t.tail[drop].event)
	}
	h.forget(t, drop)
}

// forget drops the first n events of t's tail. Called with hub.mu held.
func (h *hub) forget(t *topic, n int) {
	for _, a := range t.tail[:n] {
		t.tailBytes -= len(a.event)
		h.tailBytes -= len(a.event)
	}
	kept := copy(t.tail, t.tail[n:])
	clear(t.tail[kept:]) // let the dropped payloads go
	t.tail = t.tail[:kept]
}

// poke asks manage to bring the subscriptions in line with the topics.
func (h *hub) poke() {
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// manage is the only goroutine that subscribes and unsubscribes, so those commands
// reach Redis in the order the topics' bookkeeping assumes.
func (h *hub) manage() {
	sweep := time.NewTicker(linger / 2)
	defer sweep.Stop()
	for {
		select {
		case <-h.done:
			return
		case <-h.kick:
			h.sync(false)
		case <-sweep.C:
			h.sync(true)
		}
	}
}

// sync subscribes to the channels joined since the last sync. With all (the periodic
// sweep), or after a reconnect, it looks at every topic: it also unsubscribes from those
// idle for linger, forgets those left behind, and drops the tails of those nobody waits
// on.
func (h *hub) sync(all bool) {
	now := time.Now()
	var sub, unsub []string
	h.mu.Lock()
	ps := h.ps
	if !all && !h.resync {
		for channel := range h.wanted {
			if t := h.topics[channel]; t != nil && t.refs > 0 && !t.subscribed {
				t.subscribed = true
				t.pending++
				sub = append(sub, channel)
			}
		}
		clear(h.wanted)
		h.mu.Unlock()
		h.apply(ps, sub, nil)
		return
	}
	h.resync = false
	clear(h.wanted)
	for channel, t := range h.topics {
		if t.refs == 0 {
			// Nobody waits on it: a reader that comes back later reads from Redis, and
			// the tails of the executions that ended since the last sweep go now
			// rather than when their subscriptions end.
			h.forget(t, len(t.tail))
		}
		switch {
		case t.refs > 0 && !t.subscribed:
			t.subscribed = true
			t.pending++
			sub = append(sub, channel)
		case t.refs == 0 && t.subscribed && t.pending == 0 && now.Sub(t.idleSince) >= linger:
			// Forgetting the topic right away is safe: a later join makes a new one,
			// whose SUBSCRIBE follows this UNSUBSCRIBE on the same connection.
			unsub = append(unsub, channel)
			h.drop(channel, t)
		case t.refs == 0 && !t.subscribed:
			// Left behind by a reconnect: nothing to unsubscribe.
			h.drop(channel, t)
		}
	}
	h.mu.Unlock()
	h.apply(ps, sub, unsub)
}

// drop forgets topic t of channel, and its tail. Called with hub.mu held.
func (h *hub) drop(channel string, t *topic) {
	h.forget(t, len(t.tail))
	delete(h.topics, channel)
}

// apply sends the UNSUBSCRIBE and SUBSCRIBE that sync decided on ps.
func (h *hub) apply(ps *goredis.PubSub, sub, unsub []string) {
	if len(sub) == 0 && len(unsub) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	var err error
	if len(unsub) > 0 {
		err = ps.Unsubscribe(ctx, unsub...)
	}
	if err == nil && len(sub) > 0 {
		err = ps.Subscribe(ctx, sub...)
	}
	if err != nil {
		// receive sees the closed connection and starts over on a new one, which
		// subscribes again to everything that has waiters.
		_ = ps.Close()
	}
}

// receive reads the current connection and dispatches what arrives; it replaces the
// connection when it fails.
func (h *hub) receive() {
	failures := 0
	pinged := false
	for {
		h.mu.Lock()
		ps := h.ps
		h.mu.Unlock()
		msg, err := ps.ReceiveTimeout(context.Background(), healthInterval)
		select {
		case <-h.done:
			return
		default:
		}
		if err != nil {
			if isTimeout(err) && !pinged {
				pinged = true
				ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
				err = ps.Ping(ctx)
				cancel()
				if err == nil {
					continue // the answer arrives as a Pong
				}
			}
			failures++
			pinged = false
			h.restart(ps)
			if !h.pause(failures) {
				return
			}
			continue
		}
		failures, pinged = 0, false
		h.dispatch(msg)
	}
}

// restart replaces the failed connection old with a new one, unless that happened
// already, and has every topic with waiters subscribed again.
func (h *hub) restart(old *goredis.PubSub) {
	h.mu.Lock()
	if h.ps == old && !h.closed {
		h.ps = h.client.Subscribe(context.Background())
		h.resync = true
		for _, t := range h.topics {
			t.subscribed, t.pending, t.current = false, 0, false
			// What came on the old connection may no longer hold if Redis failed over
			// and lost writes it had announced: waiters read the state again, and the
			// announced events are read from Redis, until new messages come.
			t.messages, t.last, t.kind = 0, 0, ""
			h.forget(t, len(t.tail))
			// Joiners from now on wait for the new subscription.
			if t.isReady {
				t.ready, t.isReady = make(chan struct{}), false
			}
		}
	}
	h.mu.Unlock()
	_ = old.Close()
	h.poke()
}

// pause sleeps before the next attempt after consecutive failures, so that an
// unreachable Redis is not dialled in a busy loop. It reports false when the hub closed.
func (h *hub) pause(failures int) bool {
	if failures <= 1 {
		return true
	}
	d := min(50*time.Millisecond<<min(failures-2, 8), maxBackoff)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-h.done:
		return false
	case <-t.C:
		return true
	}
}

func (h *hub) dispatch(msg any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch m := msg.(type) {
	case *goredis.Subscription:
		if m.Kind != "subscribe" {
			return
		}
		t := h.topics[m.Channel]
		if t == nil {
			return
		}
		if t.pending > 0 {
			t.pending--
		}
		if t.subscribed && t.pending == 0 && !t.isReady {
			t.isReady = true
			close(t.ready)
		}
		// A confirmation after a reconnect means messages may have been missed.
		t.current = false
		t.broadcast()
	case *goredis.Message:
		t := h.topics[m.Channel]
		if t == nil {
			return
		}
		// A wake channel's payload is the appended sequence and the event's kind, then
		// the event (see appendScript); a cancel channel's is its kind alone, and its
		// sequence parses as 0.
		head, event, carried := strings.Cut(m.Payload, "\n")
		seq, kind, _ := strings.Cut(head, " ")
		last, err := strconv.ParseUint(seq, 10, 64)
		if err != nil {
			last, kind = 0, head
		}
		t.messages++
		t.last, t.kind = last, kind
		t.current = t.isReady && kind != "terminal"
		if carried && t.last > 0 {
			h.remember(t, t.last, event)
		}
		t.broadcast()
	}
}

// broadcast wakes every waiter of t. Called with hub.mu held.
func (t *topic) broadcast() {
	if t.wake != nil {
		close(t.wake)
		t.wake = nil
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
