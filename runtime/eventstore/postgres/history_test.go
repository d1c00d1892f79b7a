package postgres_test

import (
	"context"
	"net"
	"net/url"
	"testing"
	"time"

	pgstore "github.com/switchboard-dev/switchboard/runtime/eventstore/postgres"
	"github.com/switchboard-dev/switchboard/runtime/eventstore/storetest"
)

// TestHistories runs the history check with replicas that reach PostgreSQL through a
// proxy dropping connections at random: before a statement reaches the server, or
// after the server ran it (a COMMIT included) and before its reply arrives. Each
// replica is a Store on a pool of its own through the proxy, its listener too; the
// final reads go to the server directly.
func TestHistories(t *testing.T) {
	u, err := url.Parse(postgresURL())
	if err != nil {
		t.Fatal(err)
	}
	target := u.Host
	if u.Port() == "" {
		target = net.JoinHostPort(u.Hostname(), "5432")
	}
	schema := newSchema(t)
	check := open(t, schema, pgstore.WithRetention(time.Hour))
	proxy := storetest.StartChaosProxy(t, target, 0.01)
	var replicas []storetest.LeaseStore
	for range 3 {
		s := openThrough(t, proxy.Addr(), schema)
		replicas = append(replicas, storetest.LeaseStore{Log: s, Leases: s})
	}
	histories := 300
	if testing.Short() {
		histories = 50
	}
	storetest.CheckHistories(t, storetest.HistoryConfig{
		Histories: histories,
		Replicas:  replicas,
		Check:     check,
	})
	t.Logf("connections dropped by the proxy: %d", proxy.Drops())
}

// openThrough opens a Store on schema whose connections go through addr. Its start-up
// may meet a dropped connection too: it is tried again.
func openThrough(t *testing.T, addr, schema string) *pgstore.Store {
	t.Helper()
	for attempt := 1; ; attempt++ {
		s, err := pgstore.New(context.Background(), newPool(t, addr), pgstore.WithSchema(schema), pgstore.WithRetention(time.Hour))
		if err == nil {
			t.Cleanup(func() { s.Close() })
			return s
		}
		if attempt == 20 {
			t.Fatalf("New through the proxy: %v", err)
		}
	}
}
