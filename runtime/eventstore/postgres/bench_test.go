package postgres_test

import (
	"testing"
	"time"

	pgstore "github.com/switchboard-dev/switchboard/runtime/eventstore/postgres"
	"github.com/switchboard-dev/switchboard/runtime/eventstore/storetest"
)

// The shared benchmarks (storetest), each on a schema of its own. Every write commits
// (synchronous_commit as the server has it), so an Append's figure includes the
// server's flush of its write-ahead log.

func BenchmarkAppend(b *testing.B) {
	// A short retention lets ended executions be swept, so the tables do not grow with b.N.
	storetest.BenchmarkAppend(b, open(b, newSchema(b), pgstore.WithRetention(time.Second)), nil)
}

func BenchmarkRead20(b *testing.B) {
	storetest.BenchmarkRead20(b, open(b, newSchema(b), pgstore.WithRetention(time.Hour)))
}

func BenchmarkStatusAndResult(b *testing.B) {
	storetest.BenchmarkStatusAndResult(b, open(b, newSchema(b), pgstore.WithRetention(time.Hour)))
}

func BenchmarkRenew(b *testing.B) {
	s := open(b, newSchema(b), pgstore.WithRetention(time.Hour))
	storetest.BenchmarkRenew(b, storetest.LeaseStore{Log: s, Leases: s})
}

func BenchmarkOrphans(b *testing.B) {
	s := open(b, newSchema(b), pgstore.WithRetention(time.Hour))
	storetest.BenchmarkOrphans(b, storetest.LeaseStore{Log: s, Leases: s})
}

// BenchmarkConcurrentAppend appends to 16 executions at once; the pool has poolConns
// connections.
func BenchmarkConcurrentAppend(b *testing.B) {
	storetest.BenchmarkConcurrentAppend(b, open(b, newSchema(b), pgstore.WithRetention(time.Second)), 16)
}
