package postgres

import (
	"context"
	"time"
)

// sweepBatch is how many rows one statement of a sweep deletes at most, so that no
// sweep holds many locks, or one long transaction, at once.
const sweepBatch = 500

// sweeps are the deletions of a sweep: rows past their expiry, sweepBatch at a time.
// Deleting an execution's row deletes its events and snapshot rows with it (ON DELETE
// CASCADE). Every query already treats these rows as absent; the sweep only frees
// their space.
var sweeps = []struct{ what, sql string }{
	{"executions", `DELETE FROM {s}.executions WHERE id IN (
		SELECT id FROM {s}.executions WHERE expires_at <= statement_timestamp() LIMIT ` + sweepBatchText + `)`},
	{"reservations", `DELETE FROM {s}.reservations WHERE key IN (
		SELECT key FROM {s}.reservations WHERE expires_at <= statement_timestamp() LIMIT ` + sweepBatchText + `)`},
	{"secrets", `DELETE FROM {s}.secrets WHERE name IN (
		SELECT name FROM {s}.secrets WHERE expires_at <= statement_timestamp() LIMIT ` + sweepBatchText + `)`},
	{"budget counters", `DELETE FROM {s}.budget_counters WHERE name IN (
		SELECT name FROM {s}.budget_counters WHERE expires_at <= statement_timestamp() LIMIT ` + sweepBatchText + `)`},
}

const sweepBatchText = "500" // sweepBatch, in the queries

// Sweep deletes the rows past their expiry: terminal executions whose retention ended,
// expired reservations, secrets and budget counters. The sweeper calls it every sweep
// interval (WithSweepInterval); every replica's sweeper may run at once, since each
// statement deletes what it finds and skips nothing another deleted. It returns the
// first error, after trying every table.
func (s *Store) Sweep(ctx context.Context) (deleted int64, err error) {
	for _, sw := range sweeps {
		for {
			tag, e := s.pool.Exec(ctx, s.sql(sw.sql))
			if e != nil {
				if err == nil {
					err = s.fail(e, "sweep %s", sw.what)
				}
				break
			}
			deleted += tag.RowsAffected()
			if tag.RowsAffected() < sweepBatch {
				break
			}
		}
	}
	return deleted, err
}

// sweepEvery sweeps every d until ctx ends. A failed sweep is tried again at the next
// tick: nothing depends on it but space.
func (s *Store) sweepEvery(ctx context.Context, d time.Duration) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_, _ = s.Sweep(ctx)
		}
	}
}
