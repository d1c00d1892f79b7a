package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	pgstore "github.com/switchboard-dev/switchboard/runtime/eventstore/postgres"
	"github.com/switchboard-dev/switchboard/runtime/eventstore/storetest"
)

// retention is short so that the suite's expiry checks run on real time: it checks
// presence at retention/2 and absence at 1.5×retention.
const retention = 500 * time.Millisecond

// poolConns bounds each test pool, so that the parallel tests stay well within the
// server's max_connections.
const poolConns = 4

// postgresURL is the database the tests use: SWITCHBOARD_POSTGRES_URL, or the local
// server CI starts. An unreachable database fails the tests rather than skipping them.
func postgresURL() string {
	if u := os.Getenv("SWITCHBOARD_POSTGRES_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// newPool returns a pool on the test database (through addr instead of its host and
// port when addr is not empty), closed when the test ends.
func newPool(tb testing.TB, addr string) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(postgresURL())
	if err != nil {
		tb.Fatalf("SWITCHBOARD_POSTGRES_URL: %v", err)
	}
	cfg.MaxConns = poolConns
	if addr != "" {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			tb.Fatal(err)
		}
		p, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			tb.Fatal(err)
		}
		cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, uint16(p)
		cfg.ConnConfig.Fallbacks = nil
		cfg.ConnConfig.ConnectTimeout = 2 * time.Second
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// newSchema returns a schema name of the test's own and drops the schema when the test
// ends, after the stores registered later are closed.
func newSchema(tb testing.TB) string {
	tb.Helper()
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		tb.Fatal(err)
	}
	schema := "sb_" + hex.EncodeToString(b[:])
	admin := newPool(tb, "")
	tb.Cleanup(func() {
		if _, err := admin.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
			tb.Errorf("drop test schema %s: %v", schema, err)
		}
	})
	return schema
}

// open returns a Store on schema with its own pool, closed when the test ends.
func open(tb testing.TB, schema string, opts ...pgstore.Option) *pgstore.Store {
	tb.Helper()
	opts = append([]pgstore.Option{pgstore.WithSchema(schema), pgstore.WithRetention(retention), pgstore.WithSweepInterval(retention / 4)}, opts...)
	s, err := pgstore.New(context.Background(), newPool(tb, ""), opts...)
	if err != nil {
		tb.Fatalf("PostgreSQL at %s is unreachable (start it or set SWITCHBOARD_POSTGRES_URL): %v", postgresURL(), err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// TestConformance runs the suite of every role, each test on a schema of its own with
// a second replica's store, on a pool of its own, as the peer.
func TestConformance(t *testing.T) {
	t.Run("Log", func(t *testing.T) {
		t.Parallel()
		storetest.Log(t, harness(func(s *pgstore.Store) eventstore.Log { return s }))
	})
	t.Run("Reservations", func(t *testing.T) {
		t.Parallel()
		storetest.Reservations(t, harness(func(s *pgstore.Store) storetest.ReservationStore {
			return storetest.ReservationStore{Log: s, Reservations: s}
		}))
	})
	t.Run("Cancels", func(t *testing.T) {
		t.Parallel()
		storetest.Cancels(t, harness(func(s *pgstore.Store) storetest.CancelStore {
			return storetest.CancelStore{Log: s, Cancels: s}
		}))
	})
	t.Run("Leases", func(t *testing.T) {
		t.Parallel()
		storetest.Leases(t, harness(func(s *pgstore.Store) storetest.LeaseStore {
			return storetest.LeaseStore{Log: s, Leases: s}
		}))
	})
	t.Run("Secrets", func(t *testing.T) {
		t.Parallel()
		storetest.Secrets(t, harness(func(s *pgstore.Store) eventstore.Secrets { return s }))
	})
	t.Run("Budgets", func(t *testing.T) {
		t.Parallel()
		storetest.Budgets(t, harness(func(s *pgstore.Store) storetest.BudgetStore {
			return storetest.BudgetStore{Budgets: s}
		}))
	})
}

// harness returns the factory of a suite's harnesses: a store on a fresh schema and a
// peer on the same schema, seen as the roles the suite tests (as).
func harness[S any](as func(*pgstore.Store) S) func(t *testing.T) storetest.Harness[S] {
	return func(t *testing.T) storetest.Harness[S] {
		schema := newSchema(t)
		s := open(t, schema)
		return storetest.Harness[S]{
			Store:     as(s),
			Peer:      as(open(t, schema)),
			Close:     s.Close,
			Retention: retention,
			Advance:   time.Sleep,
		}
	}
}

// TestRefusalsRetainNothing checks that reservations released at once, as refused
// submissions release theirs, leave no row behind: the live rows of the reservations
// table (pg_column_size of each) add up to what they were.
func TestRefusalsRetainNothing(t *testing.T) {
	schema := newSchema(t)
	admin := newPool(t, "")
	storetest.CheckRefusals(t, storetest.RefusalConfig{
		Store:  open(t, schema, pgstore.WithRetention(time.Hour)),
		Cycles: 10_000,
		Retained: func() int64 {
			var n int64
			err := admin.QueryRow(context.Background(),
				"SELECT coalesce(sum(pg_column_size(r.*)), 0) FROM "+schema+".reservations r").Scan(&n)
			if err != nil {
				t.Fatalf("measure reservations: %v", err)
			}
			return n
		},
	})
}

// TestConcurrentMigrations starts several replicas at once on a fresh schema: every
// New succeeds, and each migration was applied once (0001 creates its tables without
// IF NOT EXISTS, so a second application would have failed its New).
func TestConcurrentMigrations(t *testing.T) {
	schema := newSchema(t)
	const replicas = 8
	var wg sync.WaitGroup
	errs := make([]error, replicas)
	for i := range replicas {
		pool := newPool(t, "")
		wg.Go(func() {
			s, err := pgstore.New(t.Context(), pool, pgstore.WithSchema(schema))
			if err == nil {
				t.Cleanup(func() { s.Close() })
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("replica %d: New: %v", i, err)
		}
	}
	rows, err := newPool(t, "").Query(t.Context(), "SELECT version, count(*) OVER () FROM "+schema+".schema_migrations ORDER BY version")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var versions []int
	for rows.Next() {
		var v int32
		var n int64
		if err := rows.Scan(&v, &n); err != nil {
			t.Fatal(err)
		}
		versions = append(versions, int(v))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(versions) != 1 || versions[0] != 1 {
		t.Errorf("schema_migrations holds versions %v, want [1] once", versions)
	}
}

// TestErrorsHideTheURL opens stores whose URL or DSN carries a password and cannot
// work (a closed port, a database or role that does not exist, a malformed URL): each
// Open fails, and its error names neither the password nor the user, host or database.
func TestErrorsHideTheURL(t *testing.T) {
	const password = "s3cr3t-Pa55word"
	u, err := url.Parse(postgresURL())
	if err != nil {
		t.Fatal(err)
	}
	with := func(edit func(u *url.URL)) string {
		c := *u
		edit(&c)
		return c.String()
	}
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := closed.Addr().String()
	closed.Close() // nothing listens there any more
	for name, dsn := range map[string]string{
		"closed port":      with(func(u *url.URL) { u.User = url.UserPassword("postgres", password); u.Host = deadAddr }),
		"unknown database": with(func(u *url.URL) { u.User = url.UserPassword("postgres", password); u.Path = "/no_such_db_sb" }),
		"unknown role":     with(func(u *url.URL) { u.User = url.UserPassword("no_such_role_sb", password) }),
		"malformed url":    "postgres://postgres:" + password + "@127.0.0.1:notaport/test",
		"key/value dsn":    "host=" + strings.Split(deadAddr, ":")[0] + " port=" + strings.Split(deadAddr, ":")[1] + " user=postgres password=" + password + " dbname=test connect_timeout=2",
	} {
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			s, err := pgstore.Open(ctx, dsn, pgstore.WithSchema(newSchema(t)))
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded, want an error")
			}
			msg := err.Error()
			for _, secret := range []string{password, "no_such_role_sb", "no_such_db_sb", deadAddr, "127.0.0.1"} {
				if strings.Contains(msg, secret) {
					t.Errorf("Open error %q contains %q", msg, secret)
				}
			}
			var pgErr *pgstore.Error
			if !errors.As(err, &pgErr) {
				t.Errorf("Open error %q is not a *postgres.Error", msg)
			}
			t.Logf("Open: %v", err)
		})
	}
}

// TestOpenAndReopen opens a store by URL, records an execution, closes it and finds the
// execution with a second Open, as a restarted replica does.
func TestOpenAndReopen(t *testing.T) {
	ctx := t.Context()
	schema := newSchema(t)
	s, err := pgstore.Open(ctx, postgresURL(), pgstore.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	rec := eventstore.Record{ID: "exe_reopen", CreatedAt: time.Now()}
	evs := storetest.CompletedExecution(rec.ID)
	if _, err := s.Create(ctx, rec, "", 0); err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if err := s.Append(ctx, eventstore.NoFence, ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, rec.ID); !errors.Is(err, eventstore.ErrClosed) {
		t.Errorf("Get after Close: %v, want ErrClosed", err)
	}
	again, err := pgstore.Open(ctx, postgresURL(), pgstore.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	got, err := again.Read(ctx, rec.ID, 0, 0)
	if err != nil || len(got) != len(evs) {
		t.Fatalf("Read after reopening: %d events, %v; want %d", len(got), err, len(evs))
	}
}

// TestInvalidSchema: a schema name that would need quoting is refused before anything
// is sent to the database.
func TestInvalidSchema(t *testing.T) {
	for _, name := range []string{"", "Upper", "1digit", "semi;colon", "quo\"te", strings.Repeat("a", 41)} {
		if _, err := pgstore.New(t.Context(), newPool(t, ""), pgstore.WithSchema(name)); !errors.Is(err, eventstore.ErrInvalid) {
			t.Errorf("WithSchema(%q): got %v, want ErrInvalid", name, err)
		}
	}
}

// TestUnstorableStrings: ids, keys and names that a text column cannot hold (NUL,
// invalid UTF-8), as a request path may carry them, are never found by a lookup and
// refused with ErrInvalid by a write, never sent to fail on the server.
func TestUnstorableStrings(t *testing.T) {
	ctx := t.Context()
	s := open(t, newSchema(t))
	for _, bad := range []string{"exe_\x00", "exe_\xff"} {
		if _, err := s.Get(ctx, bad); !errors.Is(err, eventstore.ErrNotFound) {
			t.Errorf("Get(%q): %v, want ErrNotFound", bad, err)
		}
		if err := s.Wait(ctx, bad, 0); !errors.Is(err, eventstore.ErrNotFound) {
			t.Errorf("Wait(%q): %v, want ErrNotFound", bad, err)
		}
		if err := s.RequestCancel(ctx, bad); !errors.Is(err, eventstore.ErrNotFound) {
			t.Errorf("RequestCancel(%q): %v, want ErrNotFound", bad, err)
		}
		if _, err := s.Acquire(ctx, bad, "replica-a", time.Minute); !errors.Is(err, eventstore.ErrNotFound) {
			t.Errorf("Acquire(%q): %v, want ErrNotFound", bad, err)
		}
		if err := s.Remove(ctx, bad); err != nil {
			t.Errorf("Remove(%q): %v, want nil", bad, err)
		}
		if _, err := s.Create(ctx, eventstore.Record{ID: bad}, "", 0); !errors.Is(err, eventstore.ErrInvalid) {
			t.Errorf("Create(%q): %v, want ErrInvalid", bad, err)
		}
		if _, _, err := s.Reserve(ctx, bad, eventstore.Reservation{ExecutionID: "exe_1"}, time.Minute, 0); !errors.Is(err, eventstore.ErrInvalid) {
			t.Errorf("Reserve(%q): %v, want ErrInvalid", bad, err)
		}
		if _, err := s.Secret(ctx, bad, []byte("x"), time.Minute); !errors.Is(err, eventstore.ErrInvalid) {
			t.Errorf("Secret(%q): %v, want ErrInvalid", bad, err)
		}
		hold := eventstore.Hold{Counter: bad, Unit: "cost", Amount: 1, Expires: time.Now().Add(time.Hour)}
		if err := s.Hold(ctx, "exe_1", []eventstore.Hold{hold}, nil); !errors.Is(err, eventstore.ErrInvalid) {
			t.Errorf("Hold on counter %q: %v, want ErrInvalid", bad, err)
		}
		if got, err := s.Counters(ctx, []string{bad}); err != nil || len(got) != 1 || got[0] != 0 {
			t.Errorf("Counters(%q): %v, %v; want [0]", bad, got, err)
		}
	}
}
