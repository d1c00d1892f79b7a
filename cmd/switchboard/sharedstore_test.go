package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	postgresstore "github.com/switchboard-dev/switchboard/runtime/eventstore/postgres"
)

// The multi-replica tests run once on each EventStore several replicas can share: Redis
// and PostgreSQL (spec/events.md, "EventStore"; spec/postgres.md). The replicas see no
// difference but their store flags, so one test body serves both; what the body reads
// or writes in the store itself goes through the store's roles (storeHandle), the same
// for both, and only what a store keeps in its own way (the expiry of a secret) is
// looked at store by store.

// sharedStore is the store the replicas of one test share: an emptied Redis database or
// a PostgreSQL database of the test's own.
type sharedStore struct {
	// name is the store's name, as --event-store spells it and as the subtest is named.
	name string
	// url is its --redis-url or --postgres-url; launchReplica picks the flags by it.
	url string
}

// eachStore runs test as subtests named redis and postgres: on Redis database db (each
// test keeps its own, see the db constants) and on a new PostgreSQL database.
func eachStore(t *testing.T, db int, test func(t *testing.T, shared sharedStore)) {
	t.Helper()
	t.Run("redis", func(t *testing.T) { test(t, redisShared(t, db)) })
	t.Run("postgres", func(t *testing.T) { test(t, postgresShared(t)) })
}

// redisShared empties Redis database db (see redisURL) for the replicas to share.
func redisShared(tb testing.TB, db int) sharedStore {
	tb.Helper()
	return sharedStore{name: "redis", url: redisURL(tb, db)}
}

// postgresShared creates a database of the test's own for the replicas to share
// (freshPostgresDatabase), dropped when the test ends, after the replicas and the test's
// own store, which were started later, are gone.
func postgresShared(tb testing.TB) sharedStore {
	tb.Helper()
	return sharedStore{name: "postgres", url: freshPostgresDatabase(tb)}
}

// storeFlags are the flags of a replica on the store at url: PostgreSQL for a
// postgres:// URL, Redis for any other.
func storeFlags(url string) []string {
	if strings.HasPrefix(url, "postgres://") || strings.HasPrefix(url, "postgresql://") {
		return []string{"--event-store", "postgres", "--postgres-url", url}
	}
	return []string{"--event-store", "redis", "--redis-url", url}
}

// storeHandle is the test's own handle on the shared store, to inspect it or to leave
// it as a replica that died would have: the roles the tests use, of either store.
type storeHandle struct {
	eventstore.Log
	eventstore.Reservations
}

// open opens the shared store as a replica would, closed when the test ends.
func (s sharedStore) open(tb testing.TB) storeHandle {
	tb.Helper()
	if s.name == "redis" {
		rs := openRedisStore(tb, s.url)
		return storeHandle{Log: rs, Reservations: rs}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ps, err := postgresstore.Open(ctx, s.url)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = ps.Close() })
	return storeHandle{Log: ps, Reservations: ps}
}

// secretTTLs returns how long each secret whose name contains part has left before it
// expires, read where the store keeps it: the TTL of its Redis key, the expires_at of
// its row in PostgreSQL (spec/postgres.md). The Secrets role does not tell.
func (s sharedStore) secretTTLs(tb testing.TB, part string) map[string]time.Duration {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ttls := map[string]time.Duration{}
	if s.name == "redis" {
		opts, err := goredis.ParseURL(s.url)
		if err != nil {
			tb.Fatal(err)
		}
		rc := goredis.NewClient(opts)
		defer rc.Close()
		keys, err := rc.Keys(ctx, "*"+part+"*").Result()
		if err != nil {
			tb.Fatal(err)
		}
		for _, k := range keys {
			ttl, err := rc.PTTL(ctx, k).Result()
			if err != nil {
				tb.Fatal(err)
			}
			ttls[k] = ttl
		}
		return ttls
	}
	conn, err := pgx.Connect(ctx, s.url)
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT name, extract(epoch FROM expires_at - statement_timestamp())::float8
		FROM `+postgresstore.DefaultSchema+`.secrets WHERE strpos(name, $1) > 0`, part)
	if err != nil {
		tb.Fatal(err)
	}
	for rows.Next() {
		var (
			name    string
			seconds float64
		)
		if err := rows.Scan(&name, &seconds); err != nil {
			tb.Fatal(err)
		}
		ttls[name] = time.Duration(seconds * float64(time.Second))
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
	return ttls
}
