// Package postgres is the durable EventStore (spec/postgres.md): every replica opens
// the same PostgreSQL database, so any of them serves an execution's events, status,
// result and cancellation while another one runs it, and nothing a call acknowledged
// is lost when a replica or the database restarts.
//
// # Layout
//
// The store keeps its tables in one schema of its own (default "switchboard", see
// WithSchema), which it creates and migrates at start-up (migrate.go): executions (one
// row per execution: record, folded status, lease, cancel request and the non-text
// parts of the snapshot), events (the log, primary key (execution_id, seq)),
// output_parts, tool_calls, texts and lists (the rest of the snapshot, see fold.go),
// reservations, secrets, budget_counters and budget_holds.
//
// # Consistency
//
// Every write is one transaction, and a call returns only after it committed: an
// acknowledged Append is on disk (and, with synchronous replication, on a standby).
// Append locks the execution's row (SELECT … FOR UPDATE), checks the fence, the repeat,
// the terminal event and the sequence under that lock, and only then inserts the event,
// folds it and sends the wake-up (pg_notify, delivered at commit); so sequences are
// gap-free and two replicas never both write one execution. Lease changes are single
// UPDATEs whose WHERE clause holds the check, which PostgreSQL re-evaluates on the
// latest row version when it waited for a concurrent writer, so of racing Acquires
// exactly one wins. Lease times are on the database's clock (statement_timestamp()), the
// one clock every replica shares.
//
// # Expiry
//
// A terminal execution, a reservation, a secret and a budget counter each carry the
// instant they expire, and every query treats a row past it as absent, so expiry is
// exact whatever the sweep interval. A sweeper goroutine deletes such rows in batches
// of sweepBatch (sweep.go), never in one long transaction.
//
// # Waiting
//
// Wait and WaitCancel register in memory (hub.go) and read the table; a dedicated
// connection LISTENs for the wake-ups appends, cancels and removals send and wakes the
// waiters of the execution named, which read again. A notification is only a hint: a
// waiter also reads every recheckInterval and whenever the listener reconnects, so a
// lost notification delays an answer and never loses it.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
)

const (
	// DefaultRetention is how long a terminal execution is kept (spec/events.md,
	// "EventStore").
	DefaultRetention = 24 * time.Hour
	// DefaultSchema is the schema the store's tables live in.
	DefaultSchema = "switchboard"

	// recheckInterval is how often a blocked Wait or WaitCancel reads the table even
	// without a wake-up: the bound on its delay while notifications are lost.
	recheckInterval = time.Second
	// retryBackoff is the first pause of a blocked call after a failed read, and of the
	// listener after a failed connection; it doubles up to maxBackoff.
	retryBackoff = 50 * time.Millisecond
	maxBackoff   = 5 * time.Second
)

// Option configures a Store.
type Option func(*config)

type config struct {
	retryFor      time.Duration
	retention     time.Duration
	schema        string
	sweepInterval time.Duration
	sweepSet      bool
}

// WithRetention sets how long a terminal execution is kept after its terminal event
// (default DefaultRetention). A negative d is treated as 0: removed at once.
func WithRetention(d time.Duration) Option {
	return func(c *config) { c.retention = max(d, 0) }
}

// WithSchema sets the schema of the store's tables (default DefaultSchema), so that
// several installations, or tests, share one database without sharing data. It must be
// a plain identifier: lower-case letters, digits and underscores, starting with a
// letter, at most 40 bytes (the wake-up channel's name is derived from it).
func WithSchema(name string) Option {
	return func(c *config) { c.schema = name }
}

// WithSweepInterval sets how often rows past their expiry are deleted (default: a tenth
// of the retention, between one second and one minute); 0 disables the sweeper. Expiry
// itself does not wait for it: expired rows count as absent at once.
func WithSweepInterval(d time.Duration) Option {
	return func(c *config) { c.sweepInterval, c.sweepSet = max(d, 0), true }
}

// WithRetryFor makes Append try again, for up to d, when the database cannot be reached
// (eventstore.ErrUnavailable), with pauses from 50 ms growing to 1 s: a short outage
// (a restart) then delays a running execution's events and loses none. A retry is safe:
// an append whose commit was acknowledged but whose answer was lost is a repeat of the
// recorded event, which succeeds and stores nothing. 0 (the default) tries once.
func WithRetryFor(d time.Duration) Option {
	return func(c *config) { c.retryFor = max(d, 0) }
}

// schemaName is what WithSchema accepts: quoting is then never needed.
var schemaName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,39}$`)

// Store is the PostgreSQL EventStore, which implements every role of package
// eventstore. Create it with New or Open and release it with Close.
type Store struct {
	pool      *pgxpool.Pool
	owned     bool // Close closes pool
	schema    string
	channel   string // the LISTEN/NOTIFY channel
	retention time.Duration
	retryFor  time.Duration
	queries   sync.Map // template → query with the schema filled in

	hub *hub

	closed    chan struct{} // closed by Close, wakes every waiter
	isClosed  atomic.Bool
	closeOnce sync.Once
	cancel    context.CancelFunc // ends the listener and the sweeper
	done      sync.WaitGroup
}

var (
	_ eventstore.Log          = (*Store)(nil)
	_ eventstore.Reservations = (*Store)(nil)
	_ eventstore.Cancels      = (*Store)(nil)
	_ eventstore.Leases       = (*Store)(nil)
	_ eventstore.Secrets      = (*Store)(nil)
	_ eventstore.Budgets      = (*Store)(nil)
)

// Open connects to the database at url (a libpq URL or key/value DSN; TLS as its
// sslmode says) and returns a Store that owns the pool. Its errors never contain the
// URL, its password or the server's messages (see Error).
func Open(ctx context.Context, url string, opts ...Option) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, &Error{Op: "parse postgres url", Kind: "malformed URL or DSN"}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, dbError("connect to postgres", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, dbError("connect to postgres", err)
	}
	s, err := New(ctx, pool, opts...)
	if err != nil {
		pool.Close()
		return nil, err
	}
	s.owned = true
	return s, nil
}

// New returns a Store on pool, which Close leaves open: it applies the schema's
// migrations (migrate.go), starts listening for wake-ups and starts the sweeper.
func New(ctx context.Context, pool *pgxpool.Pool, opts ...Option) (*Store, error) {
	c := config{retention: DefaultRetention, schema: DefaultSchema}
	for _, o := range opts {
		o(&c)
	}
	if !schemaName.MatchString(c.schema) {
		return nil, fmt.Errorf("postgres schema %q: want lower-case letters, digits and underscores, starting with a letter, at most 40 bytes: %w", c.schema, eventstore.ErrInvalid)
	}
	if !c.sweepSet {
		c.sweepInterval = min(max(c.retention/10, time.Second), time.Minute)
	}
	s := &Store{
		pool:      pool,
		schema:    c.schema,
		channel:   c.schema + "_events",
		retention: c.retention,
		retryFor:  c.retryFor,
		closed:    make(chan struct{}),
	}
	if err := s.migrate(ctx); err != nil {
		return nil, err
	}
	bg, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.hub = newHub()
	l, err := s.listen(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	s.done.Go(func() { s.listenLoop(bg, l) })
	if c.sweepInterval > 0 {
		s.done.Go(func() { s.sweepEvery(bg, c.sweepInterval) })
	}
	return s, nil
}

// Close wakes blocked callers, which return ErrClosed, as do later calls, stops the
// listener and the sweeper and, if Open made the pool, closes it. It is idempotent.
// The data stays in the database.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.isClosed.Store(true)
		close(s.closed)
		s.cancel()
		s.done.Wait()
		if s.owned {
			s.pool.Close()
		}
	})
	return nil
}

// sql returns the query template q with {s} replaced by the store's schema, made once
// per template.
func (s *Store) sql(q string) string {
	if v, ok := s.queries.Load(q); ok {
		return v.(string)
	}
	v := strings.ReplaceAll(q, "{s}", s.schema)
	s.queries.Store(q, v)
	return v
}

// Error is a failure of the database or of the connection to it. It carries the
// operation, a fixed description and, for an error the server reported, its SQLSTATE
// code, and nothing else: a server's message, or a connection error's, may name the
// host, the user or the database, and a URL's password must never reach a log.
type Error struct {
	// Op is the store operation that failed, with the execution id or key it named.
	Op string
	// Kind is a fixed description: "server error", "connection failed", ….
	Kind string
	// Code is the SQLSTATE code of a server error; empty otherwise.
	Code string
	// err is a context error the failure was, for errors.Is.
	err error
}

func (e *Error) Error() string {
	if e.Code != "" {
		return "postgres: " + e.Op + ": " + e.Kind + " (SQLSTATE " + e.Code + ")"
	}
	return "postgres: " + e.Op + ": " + e.Kind
}

// Unwrap returns the context error the failure was, if any.
func (e *Error) Unwrap() error { return e.err }

// Is reports eventstore.ErrUnavailable for a failure to reach the database: a
// connection refused or lost, or a server that is starting or shutting down (SQLSTATE
// class 08 and 57P01..57P03). A retry of the same call may succeed.
func (e *Error) Is(target error) bool {
	if target != eventstore.ErrUnavailable {
		return false
	}
	switch {
	case e.Kind == kindConnectFailed, e.Kind == kindConnectionLost:
		return true
	case strings.HasPrefix(e.Code, "08"), e.Code == "57P01", e.Code == "57P02", e.Code == "57P03":
		return true
	}
	return false
}

// Kinds of Error that are failures to reach the database.
const (
	kindConnectFailed  = "connection failed"
	kindConnectionLost = "connection lost"
)

// Ping reports whether the database answers: the replica's readiness while it does not
// (spec/postgres.md, "Outages").
func (s *Store) Ping(ctx context.Context) error {
	if s.isClosed.Load() {
		return eventstore.ErrClosed
	}
	if err := s.pool.Ping(ctx); err != nil {
		return dbError("ping postgres", err)
	}
	return nil
}

// dbError makes err, a failure of the database or the connection, an *Error for op.
func dbError(op string, err error) error {
	var pgErr *pgconn.PgError
	var connErr *pgconn.ConnectError
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		ctxErr := context.Canceled
		if errors.Is(err, context.DeadlineExceeded) {
			ctxErr = context.DeadlineExceeded
		}
		return &Error{Op: op, Kind: "interrupted: " + ctxErr.Error(), err: ctxErr}
	case errors.As(err, &pgErr):
		return &Error{Op: op, Kind: "server error", Code: pgErr.Code}
	case errors.As(err, &connErr):
		return &Error{Op: op, Kind: kindConnectFailed}
	case errors.Is(err, pgx.ErrTxClosed), errors.Is(err, pgx.ErrNoRows):
		return &Error{Op: op, Kind: "unexpected database state"}
	}
	return &Error{Op: op, Kind: kindConnectionLost}
}

// fail reports err of op, or ErrClosed once the Store is closed.
func (s *Store) fail(err error, format string, args ...any) error {
	if s.isClosed.Load() {
		return eventstore.ErrClosed
	}
	return dbError(fmt.Sprintf(format, args...), err)
}

// rollback ends tx after a failure or a refusal; its own error does not matter, the
// transaction did not commit.
func rollback(tx pgx.Tx) {
	_ = tx.Rollback(context.Background())
}

// storable reports whether s can be stored in a text column: PostgreSQL refuses NUL
// and invalid UTF-8 there. No stored id, key or name is unstorable, so a lookup by one
// finds nothing, and a write of one is refused with ErrInvalid.
func storable(ss ...string) bool {
	for _, s := range ss {
		if !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 {
			return false
		}
	}
	return true
}

// unstorable is the ErrInvalid of a write naming a string storable refuses.
func unstorable(op string) error {
	return fmt.Errorf("%s: an id, key, owner or name holds NUL or invalid UTF-8: %w", op, eventstore.ErrInvalid)
}

func notFound(id string) error {
	return fmt.Errorf("execution %s: %w", id, eventstore.ErrNotFound)
}

// Times the runtime gives are kept exactly, as seconds and nanoseconds since the epoch.

func splitTime(t time.Time) (int64, int32) {
	return t.Unix(), int32(t.Nanosecond())
}

func joinTime(sec int64, nsec int32) time.Time {
	return time.Unix(sec, int64(nsec)).UTC()
}

// interval formats d for a query's $n::interval, in microseconds (rounded up, so that
// a positive duration stays positive): PostgreSQL's precision.
func interval(d time.Duration) string {
	us := (d + time.Microsecond - 1) / time.Microsecond
	return fmt.Sprintf("%d microseconds", us)
}
