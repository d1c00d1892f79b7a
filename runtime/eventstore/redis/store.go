// Package redis is the EventStore for several replicas and restarts (spec/events.md,
// "EventStore"): every replica opens the same Redis, so any of them serves an
// execution's events, status, result and cancellation while another one runs it, and a
// restarted replica finds everything where it was.
//
// # Layout
//
// All keys start with the key prefix (default "switchboard:"). An execution's keys
// share the hash tag {<id>}, so they live in one Redis Cluster slot and one Lua script
// may touch them all:
//
//	<prefix>{<id>}:meta       hash: created_at, updated_at, last_sequence, info,
//	                          idempotency_key, terminal, cancel_requested, the lease
//	                          (lease_owner, lease_fence, lease_expires in ms on the
//	                          Redis clock, lease_token of the Acquire that took it),
//	                          remote, and the fold of the events: state, attempts,
//	                          route (JSON), error (JSON), finish_reason, result,
//	                          tool_calls (calls numbered so far), output_bytes
//	                          (present once output was recorded)
//	<prefix>{<id>}:events     stream: one entry per event, id <sequence>-0,
//	                          fields type, timestamp, data
//	<prefix>{<id>}:parts      hash: output index → part type
//	<prefix>{<id>}:text:<i>   string: the text of output index i
//	<prefix>{<id>}:calls      hash: call id → "<number> <index> <order> <name>"
//	<prefix>{<id>}:args:<n>   string: the arguments of tool call number n
//	<prefix>{<id>}:usage      list: the usage entries of each usage.reported (JSON)
//	<prefix>{<id>}:artifacts  list: the artifacts of each output.result (JSON)
//	<prefix>{<id>}:keys       set: the names of the keys above beyond meta and events
//	<prefix>{<id>}:created    string: the idempotency key the execution was created
//	                          for, expiring with that reservation (see Create)
//	<prefix>idem:<key>        hash: an idempotency reservation, expiring with its ttl
//	<prefix>idem-scope:<scope>
//	                          sorted set: the reservations of one scope (the SHA-1 of
//	                          their keys) scored by expiry in ms, which counts them
//	                          (see reserveScript)
//	<prefix>leases            sorted set: the orphan index, execution ids scored by
//	                          lease expiry in ms (see leases.go)
//	<prefix>{budgets}:…       the budget counters, what each execution holds on them
//	                          and the pending index (see budgets.go)
//
// and two pub/sub channels wake blocked callers: <prefix>{<id>}:wake (payload: the
// appended sequence and the event, see appendScript) and <prefix>{<id>}:cancel (payload:
// "cancel" or "terminal", WaitCancel's answer). The keys after events exist once the
// fold has written to them.
//
// # Consistency
//
// Create, Append, Remove, Snapshot, RequestCancel, Reserve, Release, Acquire, Renew,
// ReleaseLease, SetRemote, Hold and Settle are each one Lua script: check and write (or read) in one
// atomic step, whichever replica calls. Read is a transaction (MULTI) of EXISTS and
// XRANGE per page of events, and Snapshot reads a large output with GETRANGE after its
// script, so that no command copies a large log or output (see Read and Snapshot).
// Append checks that the execution exists, that the fence is current, that it is not
// terminal and that the sequence is the next one, then adds the stream entry, updates
// the meta hash, folds the event into the status fields and the snapshot keys and
// publishes the wake-up; the explicit entry id makes Redis itself keep the stream
// ordered by sequence. The event's data is decoded
// once, in Go, into simple operations the script applies with commands that cost what
// the event adds (APPEND, HSET, RPUSH), never a rewrite of a growing value. So Get is
// one HMGET and Snapshot one script (and a few GETRANGEs for a large output), whatever
// the number of events. Times are stored as RFC 3339 text with nanoseconds, so they
// read back as the same instants.
//
// go-redis sends a command again when its reply is lost (MaxRetries), and Redis may
// have run it already; callers may retry a call that failed that way too. So Create,
// Append, Reserve and Acquire recognise a repeat of their own completed write (the same
// record, the same last event, the same reservation, the same Acquire call) and report
// success again without writing anything, and the other writes are idempotent (see
// scripts.go).
//
// # Expiry
//
// The terminal event sets the retention (default 24h) on all the execution's keys (the
// keys set lists those beyond meta and events) with PEXPIRE; Redis removes them when it
// ends. An execution that never gets its terminal event (its replica crashed, say) would
// otherwise stay forever, so a running execution's keys all expire at one instant
// (orphan_expires in the meta hash) that is at least a long orphan ttl (default 7 days,
// see WithOrphanTTL) after its last write, and at most an eighth more: a running
// execution disappears only after that long without any event, and as a whole. Writes
// move that instant only when it has come nearer than the orphan ttl, so most appends
// set no expiry (see appendScript). Reservations expire by their own ttl. Durability is
// Redis's: executions outlive a restart of Redis itself only if it persists (AOF or
// RDB), and a failover to a replica loses the writes not yet replicated to it, which
// WithWaitReplicas narrows for terminal events.
//
// # Waiting
//
// Wait and WaitCancel block on pub/sub, multiplexed over one connection per Store (see
// hub), never on a pooled connection: they return as soon as their context ends or the
// Store is closed. WaitCancel ends on the terminal event because the append of a
// terminal event also publishes on the cancel channel. A message received is a fact
// about the stored state (the script that wrote it published it), so it answers a wait
// without a read, and the events the wake-ups carry serve a tailing reader
// (Announced); a read of the state is made once the subscription is live, after a
// reconnect (messages may have been lost) and every recheck interval. A failed read of
// the state (a killed connection, Redis failing over) does not end them: they read again
// after a short, growing pause.
package redis

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

const (
	// DefaultRetention is how long a terminal execution is kept (spec/events.md,
	// "EventStore").
	DefaultRetention = 24 * time.Hour
	// DefaultKeyPrefix starts every key and channel of the store.
	DefaultKeyPrefix = "switchboard:"
	// DefaultOrphanTTL is how long a running execution is kept after its last event.
	DefaultOrphanTTL = 7 * 24 * time.Hour

	// recheckInterval is how often a blocked Wait or WaitCancel reads the state even
	// without a wake-up: the bound on its delay while pub/sub is broken, and how it
	// learns that an execution was removed.
	recheckInterval = 2 * time.Second
	// retryBackoff is the pause of a blocked Wait or WaitCancel after a failed read;
	// it doubles with each consecutive failure, up to maxBackoff.
	retryBackoff = 50 * time.Millisecond
	// defaultWaitTimeout replaces a WithWaitReplicas timeout <= 0, which WAIT would
	// take as "forever".
	defaultWaitTimeout = time.Second
)

// Option configures a Store.
type Option func(*config)

type config struct {
	prefix       string
	retention    time.Duration
	orphanTTL    time.Duration
	waitReplicas int
	waitTimeout  time.Duration
	clientOpts   []func(*goredis.Options)
	// sequential turns the append pipeline off (WithSequentialAppends).
	sequential bool
}

// WithSequentialAppends sends every append on its own round trip instead of pipelining
// the appends of concurrent executions together (the default; see appendPipeline). It
// exists for comparison — the store's benchmarks measure both — and for a proxy in
// front of Redis that does not accept pipelines.
func WithSequentialAppends() Option {
	return func(c *config) { c.sequential = true }
}

// WithKeyPrefix sets the prefix of every key and channel (default DefaultKeyPrefix), so
// that several installations can share one Redis. It must not contain '{' or '}',
// which would change the keys' cluster hash slot.
func WithKeyPrefix(prefix string) Option {
	return func(c *config) { c.prefix = prefix }
}

// WithRetention sets how long a terminal execution is kept after its terminal event
// (default DefaultRetention). A negative d is treated as 0: removed at once.
func WithRetention(d time.Duration) Option {
	return func(c *config) { c.retention = max(d, 0) }
}

// WithOrphanTTL sets how long at least a running execution is kept after its last event
// or its creation, and at most an eighth more (default DefaultOrphanTTL); d <= 0 keeps it
// until it ends. It only matters for executions whose replica died before their terminal
// event, which another replica normally ends far sooner: set it well above the longest
// execution deadline.
func WithOrphanTTL(d time.Duration) Option {
	return func(c *config) { c.orphanTTL = max(d, 0) }
}

// WithWaitReplicas makes Append wait, after it recorded a terminal event, until n
// replicas acknowledged the write or timeout passed (Redis WAIT on the connection that
// wrote), so that a failover is unlikely to lose how an execution ended. Append
// returns nil either way: the event is recorded on the primary, and an error would
// tell the caller it was not. Terminal events that fewer than n replicas acknowledged
// in time are counted by UnderReplicated. n <= 0 (the default) waits for nothing; a
// timeout <= 0 is one second. Other events are not waited for: a lost one is repaired
// by whoever ends the execution, a lost terminal event is not. It needs a single-node,
// Sentinel or Cluster client (other clients cannot pin the connection WAIT must use,
// and skip it).
func WithWaitReplicas(n int, timeout time.Duration) Option {
	return func(c *config) {
		c.waitReplicas, c.waitTimeout = n, timeout
		if timeout <= 0 {
			c.waitTimeout = defaultWaitTimeout
		}
	}
}

// WithClientOptions adjusts the options of the client New makes, after those parsed
// from the URL (pool size, timeouts, TLS, …). NewFromClient ignores it.
func WithClientOptions(f func(*goredis.Options)) Option {
	return func(c *config) { c.clientOpts = append(c.clientOpts, f) }
}

// Store is the Redis EventStore, which implements every role of package eventstore,
// Announcer included. Create it with New or NewFromClient and release it with Close.
type Store struct {
	client goredis.UniversalClient
	owned  bool // Close closes client
	prefix string
	// Script arguments, formatted once.
	retentionMS string
	orphanMS    string
	hub         *hub
	// appends pipelines non-terminal appends; nil with WithSequentialAppends.
	appends *appendPipeline

	waitReplicas    int
	waitTimeout     time.Duration
	underReplicated atomic.Uint64

	closed    chan struct{} // closed by Close, wakes every waiter
	isClosed  atomic.Bool
	closeOnce sync.Once
}

var (
	_ eventstore.Log          = (*Store)(nil)
	_ eventstore.Reservations = (*Store)(nil)
	_ eventstore.Cancels      = (*Store)(nil)
	_ eventstore.Leases       = (*Store)(nil)
	_ eventstore.Secrets      = (*Store)(nil)
	_ eventstore.Budgets      = (*Store)(nil)
	_ eventstore.Announcer    = (*Store)(nil)
)

// New connects to the Redis at url (redis://, rediss:// or unix://, as go-redis
// ParseURL reads it), checks that it answers, and returns a Store that owns the client.
// For Sentinel or Cluster, make the client yourself and use NewFromClient.
func New(ctx context.Context, url string, opts ...Option) (*Store, error) {
	c := newConfig(opts)
	ropts, err := goredis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("parse redis url: %w", err)
	}
	for _, f := range c.clientOpts {
		f(ropts)
	}
	client := goredis.NewClient(ropts)
	if err := client.Ping(ctx).Err(); err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("ping redis at %s: %w", ropts.Addr, err)
	}
	s, err := newStore(client, c)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	s.owned = true
	return s, nil
}

// NewFromClient returns a Store on an existing client (a single node, a failover
// client or a cluster), which Close leaves open.
func NewFromClient(client goredis.UniversalClient, opts ...Option) (*Store, error) {
	return newStore(client, newConfig(opts))
}

func newConfig(opts []Option) config {
	c := config{prefix: DefaultKeyPrefix, retention: DefaultRetention, orphanTTL: DefaultOrphanTTL}
	for _, o := range opts {
		o(&c)
	}
	return c
}

func newStore(client goredis.UniversalClient, c config) (*Store, error) {
	if strings.ContainsAny(c.prefix, "{}") {
		return nil, fmt.Errorf("redis key prefix %q: braces would change the hash slot: %w", c.prefix, eventstore.ErrInvalid)
	}
	s := &Store{
		client:       client,
		prefix:       c.prefix,
		retentionMS:  strconv.FormatInt(millis(c.retention), 10),
		orphanMS:     strconv.FormatInt(millis(c.orphanTTL), 10),
		waitReplicas: c.waitReplicas,
		waitTimeout:  c.waitTimeout,
		closed:       make(chan struct{}),
	}
	s.hub = newHub(client, s.closed)
	if !c.sequential {
		s.appends = newAppendPipeline(client, s.closed)
	}
	return s, nil
}

// Key and channel names. The hash tag keeps an execution's keys in one slot.

func (s *Store) keyBase(id string) string       { return s.prefix + "{" + id + "}:" }
func (s *Store) metaKey(id string) string       { return s.prefix + "{" + id + "}:meta" }
func (s *Store) streamKey(id string) string     { return s.prefix + "{" + id + "}:events" }
func (s *Store) keysKey(id string) string       { return s.prefix + "{" + id + "}:keys" }
func (s *Store) createdKey(id string) string    { return s.prefix + "{" + id + "}:created" }
func (s *Store) leasesKey() string              { return s.prefix + "leases" }
func (s *Store) wakeChannel(id string) string   { return s.prefix + "{" + id + "}:wake" }
func (s *Store) cancelChannel(id string) string { return s.prefix + "{" + id + "}:cancel" }
func (s *Store) reservationKey(k string) string { return s.prefix + "idem:" + k }
func (s *Store) scopeKey(scope string) string   { return s.prefix + "idem-scope:" + scope }
func (s *Store) secretKey(name string) string   { return s.prefix + "secret:" + name }

// Create implements eventstore.Log.
//
// The reservation lives under its own key, in another cluster slot than the execution,
// so no script may write both. The fact that the execution was created for it is
// therefore written by the create script in the execution's slot: the created key
// holds the idempotency key, with the reservation's remaining ttl so that it lasts as
// long as the reservation, also after the execution's retention. Reserve reads it
// beside an existing reservation (see reservationCreated). Before the script, Create
// reads that ttl and, for a leased execution, files it in the orphan index (see
// leases.go). Without an idempotency key, both go in one round trip.
func (s *Store) Create(ctx context.Context, rec eventstore.Record, owner string, ttl time.Duration) (eventstore.Lease, error) {
	if err := eventstore.CheckCreate(rec, owner, ttl); err != nil {
		return eventstore.Lease{}, err
	}
	if s.isClosed.Load() {
		return eventstore.Lease{}, eventstore.ErrClosed
	}
	pipe := s.client.Pipeline()
	var (
		estimate time.Time
		filed    *goredis.IntCmd
	)
	if owner != "" {
		// Filed under an expiry estimated on this replica's clock, unless it is filed
		// already: a repeated Create must not move the entry of the lease it finds.
		estimate = time.Now().Add(ttl)
		filed = pipe.ZAddNX(ctx, s.leasesKey(), goredis.Z{Score: float64(estimate.UnixMilli()), Member: rec.ID})
	}
	var createdTTL int64
	if rec.IdempotencyKey != "" {
		var err error
		if createdTTL, err = s.reservationTTL(ctx, pipe, rec); err != nil {
			return eventstore.Lease{}, s.fail(err, "create execution %s", rec.ID)
		}
		pipe = s.client.Pipeline()
	}
	args := []any{formatTime(rec.CreatedAt), s.orphanMS, owner, millis(ttl), rec.IdempotencyKey, createdTTL}
	if rec.Info != nil {
		args = append(args, []byte(rec.Info))
	}
	keys := []string{s.metaKey(rec.ID), s.streamKey(rec.ID), s.keysKey(rec.ID), s.createdKey(rec.ID)}
	created := createScript.EvalSha(ctx, pipe, keys, args...)
	_, _ = pipe.Exec(ctx) // every command's own error is on it
	reply, err := created.Slice()
	if err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") {
		reply, err = createScript.Run(ctx, s.client, keys, args...).Slice()
	}
	if err != nil {
		return eventstore.Lease{}, s.fail(err, "create execution %s", rec.ID)
	}
	code, _ := reply[0].(int64)
	if code == 0 {
		return eventstore.Lease{}, fmt.Errorf("create execution %s: %w", rec.ID, eventstore.ErrExists)
	}
	lease, err := decodeLease(reply[1:])
	if err != nil {
		return eventstore.Lease{}, fmt.Errorf("create execution %s: %w", rec.ID, err)
	}
	if code == 1 && owner != "" && (filed.Err() != nil || lease.Expires.Sub(estimate).Abs() > indexTolerance) {
		s.index(ctx, rec.ID, lease.Expires) // the expiry on the Redis clock
	}
	return lease, nil
}

// reservationTTL returns the remaining ttl in ms of the reservation rec was created for
// if that reservation names rec.ID (0 otherwise), reading it with what pipe holds
// already.
func (s *Store) reservationTTL(ctx context.Context, pipe goredis.Pipeliner, rec eventstore.Record) (int64, error) {
	named := pipe.HGet(ctx, s.reservationKey(rec.IdempotencyKey), "execution_id")
	remaining := pipe.PTTL(ctx, s.reservationKey(rec.IdempotencyKey))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, goredis.Nil) {
		return 0, err
	}
	if named.Val() != rec.ID || remaining.Val() <= 0 {
		return 0, nil
	}
	return millis(remaining.Val()), nil
}

// Append implements eventstore.Log. After a terminal event it takes the execution out
// of the orphan index and, with WithWaitReplicas, waits for replicas.
func (s *Store) Append(ctx context.Context, fence eventstore.Fence, ev protocol.Event) error {
	if err := eventstore.CheckAppend(&ev); err != nil {
		return err
	}
	if s.isClosed.Load() {
		return eventstore.ErrClosed
	}
	id := ev.ExecutionID
	terminal := "0"
	if ev.Type.Terminal() {
		terminal = "1"
	}
	hasData := "0"
	if ev.Data != nil {
		hasData = "1"
	}
	var fold []any
	foldErr := protocol.CheckData(ev.Type, ev.Data)
	if foldErr == nil {
		fold, foldErr = foldArgs(ev)
	}
	if foldErr != nil {
		// The script still makes the checks that come first, so that both stores
		// answer alike; then it refuses the event.
		fold = []any{"", opInvalid}
	}
	args := make([]any, 0, 12+len(fold))
	args = append(args, strconv.FormatUint(ev.Sequence, 10), string(ev.Type), formatTime(ev.Timestamp),
		terminal, s.retentionMS, s.orphanMS, s.wakeChannel(id), s.cancelChannel(id),
		hasData, []byte(ev.Data), s.keyBase(id), formatFence(fence))
	args = append(args, fold...)
	keys := []string{s.metaKey(id), s.streamKey(id), s.keysKey(id)}
	var code int64
	var err error
	switch {
	case ev.Type.Terminal() && s.waitReplicas > 0:
		code, err = s.appendTerminal(ctx, keys, args)
	case s.appends != nil:
		code, err = s.appends.run(ctx, keys, args)
	default:
		code, err = appendScript.Run(ctx, s.client, keys, args...).Int64()
	}
	switch {
	case err != nil:
		return s.fail(err, "append to %s", id)
	case code == -1:
		return notFound(id)
	case code == -2:
		return fmt.Errorf("append to %s: %w", id, eventstore.ErrTerminated)
	case code == -3:
		return fmt.Errorf("append to %s: event %d (%s): %w: %w", id, ev.Sequence, ev.Type, eventstore.ErrInvalid, foldErr)
	case code == -4:
		return fmt.Errorf("append to %s: fence %d is not current: %w", id, fence, eventstore.ErrLeaseLost)
	case code > 0:
		return fmt.Errorf("append to %s: sequence %d, next is %d: %w", id, ev.Sequence, code, eventstore.ErrSequence)
	}
	if ev.Type.Terminal() {
		s.unindex(ctx, id)
	}
	return nil
}

// appendTerminal runs appendScript for a terminal event and then, for WithWaitReplicas,
// WAIT. WAIT counts the replicas that acknowledged the writes of its own connection, so
// both run on one connection taken from the pool, the node's that holds the execution's
// keys, and not in a shared pipeline. The wait's outcome changes nothing in the answer
// (see WithWaitReplicas).
func (s *Store) appendTerminal(ctx context.Context, keys []string, args []any) (int64, error) {
	conn, err := s.nodeConn(ctx, keys[0])
	if err != nil {
		return 0, err
	}
	if conn == nil {
		return appendScript.Run(ctx, s.client, keys, args...).Int64()
	}
	defer conn.Close()
	code, err := appendScript.Run(ctx, conn, keys, args...).Int64()
	if err != nil || code != 0 {
		return code, err
	}
	if acked, err := conn.Wait(ctx, s.waitReplicas, s.waitTimeout).Result(); err != nil || acked < int64(s.waitReplicas) {
		s.underReplicated.Add(1)
	}
	return 0, nil
}

// nodeConn returns a connection of its own to the primary that holds key, or nil for a
// kind of client that cannot give one. The caller closes it, which returns it to the
// pool.
func (s *Store) nodeConn(ctx context.Context, key string) (*goredis.Conn, error) {
	switch c := s.client.(type) {
	case *goredis.Client: // a single node, or a primary found by Sentinel
		return c.Conn(), nil
	case *goredis.ClusterClient:
		node, err := c.MasterForKey(ctx, key)
		if err != nil {
			return nil, err
		}
		return node.Conn(), nil
	}
	return nil, nil
}

// UnderReplicated returns how many terminal events fewer replicas than WithWaitReplicas
// asked for acknowledged in time (or whose WAIT failed) since the Store was made: each
// is recorded, but a failover before it reaches a replica would lose it.
func (s *Store) UnderReplicated() uint64 {
	return s.underReplicated.Load()
}

// Get implements eventstore.Log.
func (s *Store) Get(ctx context.Context, id string) (eventstore.Status, error) {
	if s.isClosed.Load() {
		return eventstore.Status{}, eventstore.ErrClosed
	}
	vals, err := s.client.HMGet(ctx, s.metaKey(id), "last_sequence", "created_at", "updated_at",
		"terminal", "cancel_requested", "info", "state", "attempts", "route", "error",
		"idempotency_key", "remote", "lease_owner", "lease_fence", "lease_expires", "output_bytes").Result()
	if err != nil {
		return eventstore.Status{}, s.fail(err, "get execution %s", id)
	}
	last, ok := vals[0].(string)
	if !ok {
		return eventstore.Status{}, notFound(id)
	}
	st := eventstore.Status{
		Record:          eventstore.Record{ID: id},
		Terminal:        vals[3] != nil,
		CancelRequested: vals[4] != nil,
		State:           protocol.StatusAccepted,
	}
	if info, ok := vals[5].(string); ok {
		st.Info = json.RawMessage(info)
	}
	st.IdempotencyKey, _ = vals[10].(string)
	if remote, ok := vals[11].(string); ok {
		st.Remote = json.RawMessage(remote)
	}
	if state, ok := vals[6].(string); ok {
		st.State = protocol.Status(state)
	}
	if st.LastSequence, err = strconv.ParseUint(last, 10, 64); err == nil {
		if st.CreatedAt, err = parseTime(vals[1]); err == nil {
			st.UpdatedAt, err = parseTime(vals[2])
		}
	}
	if attempts, ok := vals[7].(string); ok && err == nil {
		st.Attempts, err = strconv.Atoi(attempts)
	}
	if route, ok := vals[8].(string); ok && err == nil {
		err = json.Unmarshal([]byte(route), &st.Route)
	}
	if failure, ok := vals[9].(string); ok && err == nil {
		err = json.Unmarshal([]byte(failure), &st.Error)
	}
	if out, ok := vals[15].(string); ok && err == nil {
		st.Output = true
		st.OutputBytes, err = strconv.ParseInt(out, 10, 64)
	}
	if err == nil {
		st.Lease, err = decodeLease(vals[12:15])
	}
	if err != nil {
		return eventstore.Status{}, fmt.Errorf("get execution %s: corrupt meta hash: %w", id, err)
	}
	return st, nil
}

// Snapshot implements eventstore.Log: one script reads every folded field and key of
// the execution at one instant, with the texts of its output parts and tool calls as
// long as they hold at most inlineTextBytes together. The texts beyond are read after
// it, with GETRANGE in round trips of about readPageBytes (spec/redis.md, "Reads"): the
// prefix of each text that the script measured, which is what it held at that instant.
func (s *Store) Snapshot(ctx context.Context, id string) (protocol.Snapshot, error) {
	if s.isClosed.Load() {
		return protocol.Snapshot{}, eventstore.ErrClosed
	}
	reply, err := snapshotScript.Run(ctx, s.client, []string{s.metaKey(id)}, s.keyBase(id), inlineTextBytes).Slice()
	if errors.Is(err, goredis.Nil) {
		return protocol.Snapshot{}, notFound(id)
	}
	if err != nil {
		return protocol.Snapshot{}, s.fail(err, "snapshot %s", id)
	}
	if len(reply) == 9 {
		if err := s.readTexts(ctx, id, reply[5], reply[6]); err != nil {
			return protocol.Snapshot{}, err
		}
	}
	snap, err := decodeSnapshot(id, reply)
	if err != nil {
		return protocol.Snapshot{}, fmt.Errorf("snapshot %s: %w", id, err)
	}
	return snap, nil
}

// readTexts replaces each text that snapshotScript returned as {key, length}, in the
// (name, entry, text) triples of lists, by the first length bytes the key holds. A key
// that holds fewer was removed with its execution since the script ran: ErrNotFound.
func (s *Store) readTexts(ctx context.Context, id string, lists ...any) error {
	// A piece is a range of a long text, read with one GETRANGE.
	type piece struct {
		text     *strings.Builder
		from, to int64 // GETRANGE's bounds, inclusive
		key      string
		got      *goredis.StringCmd
	}
	var (
		pieces []piece
		slots  []*any             // where the long texts go in the reply
		texts  []*strings.Builder // and what they are read into
	)
	for _, l := range lists {
		triples, _ := l.([]any)
		for i := 2; i < len(triples); i += 3 {
			long, ok := triples[i].([]any)
			if !ok {
				continue // the text itself
			}
			if len(long) != 2 {
				return fmt.Errorf("snapshot %s: text: %w", id, errCorrupt)
			}
			key, ok1 := long[0].(string)
			n, ok2 := long[1].(int64)
			if !ok1 || !ok2 {
				return fmt.Errorf("snapshot %s: text: %w", id, errCorrupt)
			}
			text := new(strings.Builder)
			text.Grow(int(n))
			for from := int64(0); from < n; from += readPageBytes {
				pieces = append(pieces, piece{text: text, from: from, to: min(from+readPageBytes, n) - 1, key: key})
			}
			slots, texts = append(slots, &triples[i]), append(texts, text)
		}
	}
	// The pieces go in pipelines of about readPageBytes, so that small texts share a
	// round trip and no round trip makes Redis copy much more than a page.
	for len(pieces) > 0 {
		pipe := s.client.Pipeline()
		batch, size := 0, int64(0)
		for ; batch < len(pieces); batch++ {
			p := &pieces[batch]
			if batch > 0 && size+p.to-p.from+1 > readPageBytes {
				break
			}
			p.got = pipe.GetRange(ctx, p.key, p.from, p.to)
			size += p.to - p.from + 1
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return s.fail(err, "snapshot %s", id)
		}
		for _, p := range pieces[:batch] {
			if int64(len(p.got.Val())) != p.to-p.from+1 {
				return notFound(id)
			}
			p.text.WriteString(p.got.Val())
		}
		pieces = pieces[batch:]
	}
	for i, text := range texts {
		*slots[i] = text.String()
	}
	return nil
}

// Read implements eventstore.Log. It reads in pages, each one transaction of EXISTS on
// the meta hash and XRANGE … COUNT on the stream (spec/redis.md, "Reads"), so that an
// execution that expires during a page is never read as empty, and no command copies
// more of a long log than one page: the first page holds at most readPage events (what
// a stream reads at a time), every later one about readPageBytes of data, sized by the
// largest event read so far. Events are never changed once recorded, so the pages add
// up to the log as it was when the last of them was read.
//
// The pages are transactions rather than a script: Redis serves XRANGE's reply directly,
// where a script converts every entry to a Lua value and back, which made a read of 64
// MiB take it 0.36 s instead of 0.04 s.
func (s *Store) Read(ctx context.Context, id string, after uint64, limit int) ([]protocol.Event, error) {
	if s.isClosed.Load() {
		return nil, eventstore.ErrClosed
	}
	if after == math.MaxUint64 {
		// No sequence can follow: only the existence check is left.
		n, err := s.client.Exists(ctx, s.metaKey(id)).Result()
		switch {
		case err != nil:
			return nil, s.fail(err, "read %s", id)
		case n == 0:
			return nil, notFound(id)
		}
		return nil, nil
	}
	var out []protocol.Event
	count, largest := readPage, 0
	for {
		if limit > 0 {
			count = min(count, limit-len(out))
		}
		evs, size, err := s.readPage(ctx, id, after, count)
		if err != nil {
			return nil, err
		}
		if out == nil {
			out = evs
		} else {
			out = append(out, evs...)
		}
		if len(evs) < count || (limit > 0 && len(out) == limit) {
			return out, nil
		}
		after = evs[len(evs)-1].Sequence
		largest = max(largest, size, 1)
		count = min(max(readPageBytes/largest, 1), maxReadPage)
	}
}

// Pages of Read.
const (
	// readPage is the size of a Read's first page: a stream's read (see httpapi) is
	// one page, and a page of events of the largest size (protocol.MaxEventBytes) is
	// still served in tens of milliseconds.
	readPage = 32
	// readPageBytes is the data a later page is sized to hold, and what a Snapshot
	// reads of the output in one round trip.
	readPageBytes = 4 << 20
	// inlineTextBytes is how much of the output a Snapshot's script returns itself.
	inlineTextBytes = 1 << 20
	// maxReadPage bounds the events of a page of small events.
	maxReadPage = 1024
)

// readPage reads at most count events of execution id after the given sequence, and
// returns them with the size of the largest one's data.
func (s *Store) readPage(ctx context.Context, id string, after uint64, count int) ([]protocol.Event, int, error) {
	var (
		exists  *goredis.IntCmd
		entries *goredis.Cmd
	)
	_, err := s.client.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		exists = p.Exists(ctx, s.metaKey(id))
		entries = p.Do(ctx, "XRANGE", s.streamKey(id), strconv.FormatUint(after+1, 10)+"-0", "+", "COUNT", count)
		return nil
	})
	if err != nil {
		return nil, 0, s.fail(err, "read %s", id)
	}
	if exists.Val() == 0 {
		return nil, 0, notFound(id)
	}
	reply, err := entries.Slice()
	if err != nil {
		return nil, 0, fmt.Errorf("read %s: %w", id, err)
	}
	evs, err := decodeEvents(id, reply)
	if err != nil {
		return nil, 0, fmt.Errorf("read %s: %w", id, err)
	}
	largest := 0
	for _, ev := range evs {
		largest = max(largest, len(ev.Data))
	}
	return evs, largest, nil
}

// Announced implements eventstore.Announcer: the events of id after `after` that the
// wake-ups received by this Store carried, kept by the hub while the execution's wake
// channel is subscribed.
func (s *Store) Announced(id string, after uint64, limit int) []protocol.Event {
	if s.isClosed.Load() {
		return nil
	}
	evs, err := decodeAnnounced(id, s.hub.announced(s.wakeChannel(id), after, limit))
	if err != nil {
		return nil // not this package's format: Read tells
	}
	return evs
}

// Wait implements eventstore.Log.
func (s *Store) Wait(ctx context.Context, id string, after uint64) error {
	if s.isClosed.Load() {
		return eventstore.ErrClosed
	}
	return s.block(ctx, waiting{
		channel: s.wakeChannel(id),
		check: func(ctx context.Context) (bool, error) {
			vals, err := s.client.HMGet(ctx, s.metaKey(id), "last_sequence", "terminal").Result()
			if err != nil {
				return false, fmt.Errorf("wait on %s: %w", id, err)
			}
			last, ok := vals[0].(string)
			if !ok {
				return true, notFound(id)
			}
			n, err := strconv.ParseUint(last, 10, 64)
			switch {
			case err != nil:
				return false, fmt.Errorf("wait on %s: corrupt meta hash: %w", id, err)
			case n > after:
				return true, nil
			case vals[1] != nil:
				return true, fmt.Errorf("wait on %s after %d: %w", id, after, eventstore.ErrTerminated)
			}
			return false, nil
		},
		// A message announcing a sequence past the cursor answers without a read. One
		// announcing no more than the cursor, and not the terminal event, on a
		// subscription that has stayed up since, shows that nothing newer exists yet:
		// the events up to the cursor were announced on it, and so will every later one
		// be.
		told:  func(n news) (bool, error) { return n.last > after, nil },
		quiet: func(n news) bool { return n.current && n.last <= after },
		// No read before subscribing: a stream waits on a running execution, whose next
		// events come as messages once the subscription is live, and a read made before
		// would have to be made again then (it cannot see what comes in between).
	})
}

// RequestCancel implements eventstore.Cancels.
func (s *Store) RequestCancel(ctx context.Context, id string) error {
	if s.isClosed.Load() {
		return eventstore.ErrClosed
	}
	code, err := cancelScript.Run(ctx, s.client, []string{s.metaKey(id)}, s.cancelChannel(id)).Int()
	switch {
	case err != nil:
		return s.fail(err, "cancel %s", id)
	case code == -1:
		return notFound(id)
	case code == -2:
		return fmt.Errorf("cancel %s: %w", id, eventstore.ErrTerminated)
	}
	return nil
}

// Remove implements eventstore.Log: one script, so that a removal never races the
// terminal event's expiry settings or a reader's view of half the keys.
func (s *Store) Remove(ctx context.Context, id string) error {
	if s.isClosed.Load() {
		return eventstore.ErrClosed
	}
	keys := []string{s.metaKey(id), s.streamKey(id), s.keysKey(id)}
	code, err := removeScript.Run(ctx, s.client, keys).Int()
	switch {
	case err != nil:
		return s.fail(err, "remove %s", id)
	case code == -1:
		return fmt.Errorf("remove %s: %w", id, eventstore.ErrNotTerminal)
	}
	return nil
}

// WaitCancel implements eventstore.Cancels.
func (s *Store) WaitCancel(ctx context.Context, id string) error {
	if s.isClosed.Load() {
		return eventstore.ErrClosed
	}
	terminated := func() error { return fmt.Errorf("wait for cancel of %s: %w", id, eventstore.ErrTerminated) }
	return s.block(ctx, waiting{
		channel: s.cancelChannel(id),
		check: func(ctx context.Context) (bool, error) {
			vals, err := s.client.HMGet(ctx, s.metaKey(id), "last_sequence", "cancel_requested", "terminal").Result()
			switch {
			case err != nil:
				return false, fmt.Errorf("wait for cancel of %s: %w", id, err)
			case vals[0] == nil:
				return true, notFound(id)
			case vals[1] != nil:
				return true, nil
			case vals[2] != nil:
				return true, terminated()
			}
			return false, nil
		},
		// The cancel script publishes "cancel" once it has recorded the request, and the
		// append of the terminal event "terminal", or "cancel" when a cancel was
		// requested before: either message is the answer.
		told: func(n news) (bool, error) {
			switch n.kind {
			case "cancel":
				return true, nil
			case "terminal":
				return true, terminated()
			}
			return false, nil
		},
		quiet: func(news) bool { return false },
	})
}

// waiting is one blocked call (Wait or WaitCancel): its channel, how to read the state
// it waits on, and what the channel's messages tell.
type waiting struct {
	channel string
	// check reads the state from Redis and reports done with the call's answer, or not
	// done with a nil error to keep waiting, or not done with the error of a failed read.
	check func(context.Context) (bool, error)
	// told reports whether the channel's messages answer the call without a read, and
	// with what. It is asked only when messages were received.
	told func(news) (bool, error)
	// quiet reports whether the messages show that the state holds nothing for the call
	// yet, as long as the subscription stays up: then it waits without a read.
	quiet func(news) bool
}

// block waits on w.channel until w.check reports done or the messages answer (w.told).
//
// A failed read is retried after a pause that grows with consecutive failures, up to
// maxBackoff: a killed connection or a Redis restarting for a moment must not end a
// wait, or the engine would stop watching for cancels and a reader's stream would
// break. So block returns only the call's answer (nil, ErrTerminated, ErrNotFound),
// ctx.Err() or ErrClosed.
func (s *Store) block(ctx context.Context, w waiting) error {
	t := s.hub.join(w.channel)
	defer s.hub.leave(t)
	// The recheck timer is made once the call has to sleep: a wait that the messages
	// received answer at once (a live tail's, at every event) costs none.
	var timer *time.Timer
	recheckC := func() <-chan time.Time {
		if timer == nil {
			timer = time.NewTimer(recheckInterval)
		}
		return timer.C
	}
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()

	if ready, live := s.hub.readyChan(t); !live {
		// Only a check made once the subscription is live cannot miss a message. If
		// it does not come in time (Redis unreachable), polling takes over.
		select {
		case <-ready:
		case <-recheckC():
			timer.Reset(recheckInterval)
		case <-ctx.Done():
			return ctx.Err()
		case <-s.closed:
			return eventstore.ErrClosed
		}
	}

	failures := 0
	recheck := false // the recheck interval passed since the last read
	for {
		wake, heard := s.hub.watch(t)
		// Messages received on the current connection are facts about the stored state,
		// however long ago they came (a reconnect forgets them).
		if heard.messages > 0 {
			if done, err := w.told(heard); done {
				return err
			}
		}
		// A confirmation after a reconnect (messages may have been lost) and each
		// recheck interval lead to a read.
		if recheck || !w.quiet(heard) {
			done, err := s.checkNow(ctx, w.check)
			if done {
				return err
			}
			if err != nil {
				// Messages are not waited for: the next read is the one that can tell.
				failures++
				if err := s.backoff(ctx, failures); err != nil {
					return err
				}
				continue
			}
		}
		failures, recheck = 0, false
		select {
		case <-wake:
		case <-recheckC():
			timer.Reset(recheckInterval)
			recheck = true
		case <-ctx.Done():
			return ctx.Err()
		case <-s.closed:
			return eventstore.ErrClosed
		}
	}
}

// checkNow runs check. A failed read is reported as not done with its error, to be
// retried, unless ctx has ended or the Store (or its client) is closed: then the call
// is done with ctx.Err() or ErrClosed.
func (s *Store) checkNow(ctx context.Context, check func(context.Context) (bool, error)) (bool, error) {
	done, err := check(ctx)
	if done || err == nil {
		return done, err
	}
	switch {
	case ctx.Err() != nil:
		return true, ctx.Err()
	case s.isClosed.Load() || errors.Is(err, goredis.ErrClosed):
		return true, eventstore.ErrClosed
	}
	return false, err
}

// backoff pauses before the next read after the given number of consecutive failed
// reads: 50ms, doubling up to maxBackoff. It returns ctx.Err() or ErrClosed if the wait
// ends first.
func (s *Store) backoff(ctx context.Context, failures int) error {
	d := min(retryBackoff<<min(failures-1, 8), maxBackoff)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.closed:
		return eventstore.ErrClosed
	}
}

// Reserve implements eventstore.Reservations.
func (s *Store) Reserve(ctx context.Context, key string, r eventstore.Reservation, ttl time.Duration, limit int) (eventstore.Reservation, bool, error) {
	if err := eventstore.CheckReserve(key, ttl); err != nil {
		return eventstore.Reservation{}, false, err
	}
	if s.isClosed.Load() {
		return eventstore.Reservation{}, false, eventstore.ErrClosed
	}
	args := []any{millis(ttl), r.Fingerprint, r.ExecutionID, formatTime(r.CreatedAt), r.Scope, max(limit, 0)}
	if r.Response != nil {
		args = append(args, []byte(r.Response))
	}
	keys := []string{s.reservationKey(key), s.scopeKey(r.Scope)}
	reply, err := reserveScript.Run(ctx, s.client, keys, args...).Result()
	if err != nil {
		return eventstore.Reservation{}, false, s.fail(err, "reserve %s", key)
	}
	if n, ok := reply.(int64); ok && n == 1 {
		r.Response = bytes.Clone(r.Response)
		r.Created = false // only Create marks it
		return r, true, nil
	}
	if vals, ok := reply.([]any); ok && len(vals) == 2 && vals[0] == int64(-1) {
		wait, _ := vals[1].(int64)
		return eventstore.Reservation{}, false, &eventstore.ReservationLimitError{Limit: limit, RetryAfter: time.Duration(wait) * time.Millisecond}
	}
	existing, mine, err := decodeReservation(reply)
	if err != nil {
		return eventstore.Reservation{}, false, fmt.Errorf("reserve %s: %w", key, err)
	}
	if existing.Created, err = s.reservationCreated(ctx, key, existing.ExecutionID); err != nil {
		return eventstore.Reservation{}, false, s.fail(err, "reserve %s", key)
	}
	return existing, mine, nil
}

// reservationCreated reports whether execution id was created for the reservation
// under key: its created key holds key (see Create). The reservation is never changed
// once made and the created key is written once, so reading them one after the other
// gives the answer of the later read.
func (s *Store) reservationCreated(ctx context.Context, key, id string) (bool, error) {
	created, err := s.client.Get(ctx, s.createdKey(id)).Result()
	if errors.Is(err, goredis.Nil) {
		return false, nil
	}
	return created == key, err
}

// Release implements eventstore.Reservations. It reads the scope the reservation was stored
// with first, to name the scope's index among the script's keys. A reservation never
// changes once made, so the script finds the same one, or none, or another request's,
// which it leaves alone.
func (s *Store) Release(ctx context.Context, key, executionID string) error {
	if s.isClosed.Load() {
		return eventstore.ErrClosed
	}
	keys := []string{s.reservationKey(key)}
	cur, err := s.client.HMGet(ctx, keys[0], "execution_id", "scope").Result()
	if err != nil {
		return s.fail(err, "release %s", key)
	}
	if id, _ := cur[0].(string); id != executionID {
		return nil // missing or foreign
	}
	if scope, ok := cur[1].(string); ok {
		keys = append(keys, s.scopeKey(scope))
	}
	if err := releaseScript.Run(ctx, s.client, keys, executionID).Err(); err != nil {
		return s.fail(err, "release %s", key)
	}
	return nil
}

// Secret implements eventstore.Secrets: SET NX GET PX stores the candidate with its expiry
// unless a secret exists, and answers the existing one, in one atomic command.
func (s *Store) Secret(ctx context.Context, name string, candidate []byte, ttl time.Duration) ([]byte, error) {
	if err := eventstore.CheckSecret(name, candidate, ttl); err != nil {
		return nil, err
	}
	if s.isClosed.Load() {
		return nil, eventstore.ErrClosed
	}
	old, err := s.client.SetArgs(ctx, s.secretKey(name), candidate, goredis.SetArgs{Mode: "NX", Get: true, TTL: ttl}).Bytes()
	switch {
	case errors.Is(err, goredis.Nil):
		return bytes.Clone(candidate), nil // stored now
	case err != nil:
		return nil, s.fail(err, "secret %s", name)
	}
	return old, nil
}

// Close wakes blocked callers, which return ErrClosed, as do later calls, closes the
// pub/sub connection and, if New made the client, the client. It is idempotent. The
// data stays in Redis.
func (s *Store) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.isClosed.Store(true)
		close(s.closed)
		s.hub.close()
		if s.owned {
			err = s.client.Close()
		}
	})
	return err
}

// fail wraps a Redis error with its operation, reporting a call cut short by Close as
// ErrClosed.
func (s *Store) fail(err error, format string, args ...any) error {
	if s.isClosed.Load() || errors.Is(err, goredis.ErrClosed) {
		return eventstore.ErrClosed
	}
	return fmt.Errorf(format+": %w", append(args, err)...)
}

func notFound(id string) error {
	return fmt.Errorf("execution %s: %w", id, eventstore.ErrNotFound)
}

// formatFence formats a fence as the scripts compare it with lease_fence.
func formatFence(f eventstore.Fence) string {
	return strconv.FormatUint(uint64(f), 10)
}

// millis converts d to whole milliseconds for PEXPIRE, rounding up so that a positive
// duration never becomes 0 (which would delete the key at once).
func millis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
