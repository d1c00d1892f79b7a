package redis_test

import (
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	redisstore "github.com/switchboard-dev/switchboard/runtime/eventstore/redis"
	"github.com/switchboard-dev/switchboard/runtime/eventstore/storetest"
)

// TestHistories runs the history check with replicas that reach Redis through a proxy
// dropping connections at random: before a command reaches Redis, or after Redis ran
// it and before its reply arrives. The replicas' clients retry a failed command 0, 1 or
// 3 times (go-redis MaxRetries), so both repeated scripts and failed calls happen.
func TestHistories(t *testing.T) {
	o, err := goredis.ParseURL(redisURL())
	if err != nil {
		t.Fatal(err)
	}
	proxy := storetest.StartChaosProxy(t, o.Addr, 0.01)
	prefix := newPrefix(t)
	var replicas []storetest.LeaseStore
	for _, retries := range []int{-1, 1, 3} {
		ro := *o
		ro.Addr = proxy.Addr()
		ro.MaxRetries = retries
		ro.MinRetryBackoff, ro.MaxRetryBackoff = time.Millisecond, 5*time.Millisecond
		client := goredis.NewClient(&ro)
		t.Cleanup(func() { client.Close() })
		s, err := redisstore.NewFromClient(client, redisstore.WithKeyPrefix(prefix), redisstore.WithRetention(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		replicas = append(replicas, storetest.LeaseStore{Log: s, Leases: s})
	}
	histories := 300
	if testing.Short() {
		histories = 50
	}
	storetest.CheckHistories(t, storetest.HistoryConfig{
		Histories: histories,
		Replicas:  replicas,
		Check:     open(t, prefix, redisstore.WithRetention(time.Hour)),
	})
	t.Logf("connections dropped by the proxy: %d", proxy.Drops())
}
