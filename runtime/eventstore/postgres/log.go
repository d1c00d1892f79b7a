package postgres

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// chunkBytes is the size a text chunk grows to before a delta starts the next one
// (spec/postgres.md, "Snapshot"): small enough that appending to it rewrites little,
// and that a row stays below the size at which PostgreSQL moves values out of line.
const chunkBytes = 1800

// readPage is how many events one statement of Read returns at most, so that no
// statement copies a long log at once.
const readPage = 512

// live is the condition of an execution row that is not past its retention.
const live = "(e.expires_at IS NULL OR e.expires_at > statement_timestamp())"

// Create implements eventstore.Log: one transaction inserts the row, with its lease,
// and marks the reservation it was created for.
func (s *Store) Create(ctx context.Context, rec eventstore.Record, owner string, ttl time.Duration) (eventstore.Lease, error) {
	if err := eventstore.CheckCreate(rec, owner, ttl); err != nil {
		return eventstore.Lease{}, err
	}
	if s.isClosed.Load() {
		return eventstore.Lease{}, eventstore.ErrClosed
	}
	if !storable(rec.ID, rec.IdempotencyKey, owner) {
		return eventstore.Lease{}, unstorable("create execution")
	}
	for {
		lease, retry, err := s.create(ctx, rec, owner, ttl)
		if !retry {
			return lease, err
		}
	}
}

// create is one attempt of Create; retry reports that it removed an expired row under
// rec.ID and Create must insert again.
func (s *Store) create(ctx context.Context, rec eventstore.Record, owner string, ttl time.Duration) (lease eventstore.Lease, retry bool, err error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return lease, false, s.fail(err, "create execution %s", rec.ID)
	}
	defer rollback(tx)
	sec, nsec := splitTime(rec.CreatedAt)
	var leaseTTL *string
	if owner != "" {
		v := interval(ttl)
		leaseTTL = &v
	}
	var info []byte
	if rec.Info != nil {
		info = bytes.Clone(rec.Info)
		if info == nil {
			info = []byte{}
		}
	}
	row := tx.QueryRow(ctx, s.sql(`
		INSERT INTO {s}.executions AS e (id, created_s, created_ns, info, idempotency_key, updated_s, updated_ns,
			lease_owner, lease_fence, lease_expires)
		VALUES ($1, $2, $3, $4, $5, $2, $3, $6, CASE WHEN $7::interval IS NULL THEN 0 ELSE 1 END,
			statement_timestamp() + $7::interval)
		ON CONFLICT (id) DO NOTHING
		RETURNING e.lease_owner, e.lease_fence, e.lease_expires`),
		rec.ID, sec, nsec, nullable(info), rec.IdempotencyKey, owner, leaseTTL)
	lease, err = scanLease(row)
	switch {
	case err == nil:
		if rec.IdempotencyKey != "" {
			if _, err := tx.Exec(ctx, s.sql(`
				UPDATE {s}.reservations SET created = true
				WHERE key = $1 AND execution_id = $2 AND expires_at > statement_timestamp()`),
				rec.IdempotencyKey, rec.ID); err != nil {
				return lease, false, s.fail(err, "create execution %s", rec.ID)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			return lease, false, s.fail(err, "create execution %s", rec.ID)
		}
		return lease, false, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return lease, false, s.fail(err, "create execution %s", rec.ID)
	}
	// The id is taken: by this record (a repeat of the Create that stored it), by
	// another one, or by an execution past its retention that the sweep has not
	// removed yet, which counts as absent.
	var (
		cs      int64
		cns     int32
		curInfo []byte
		expired bool
	)
	row = tx.QueryRow(ctx, s.sql(`
		SELECT e.created_s, e.created_ns, e.info, NOT `+live+`, e.lease_owner, e.lease_fence, e.lease_expires
		FROM {s}.executions e WHERE e.id = $1 FOR UPDATE`), rec.ID)
	var owner2 string
	var fence int64
	var expires *time.Time
	if err := row.Scan(&cs, &cns, &curInfo, &expired, &owner2, &fence, &expires); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return lease, true, nil // removed since: insert again
		}
		return lease, false, s.fail(err, "create execution %s", rec.ID)
	}
	if expired {
		if _, err := tx.Exec(ctx, s.sql(`DELETE FROM {s}.executions WHERE id = $1`), rec.ID); err != nil {
			return lease, false, s.fail(err, "create execution %s", rec.ID)
		}
		if err := tx.Commit(ctx); err != nil {
			return lease, false, s.fail(err, "create execution %s", rec.ID)
		}
		return lease, true, nil
	}
	if !joinTime(cs, cns).Equal(rec.CreatedAt) || (curInfo == nil) != (rec.Info == nil) || !bytes.Equal(curInfo, rec.Info) {
		return lease, false, fmt.Errorf("create execution %s: %w", rec.ID, eventstore.ErrExists)
	}
	return makeLease(owner2, fence, expires), false, nil
}

// Append implements eventstore.Log: one transaction locks the execution's row, makes
// every check under that lock and then writes the event, its fold and the wake-up
// (spec/postgres.md, "Append").
func (s *Store) Append(ctx context.Context, fence eventstore.Fence, ev protocol.Event) error {
	if err := eventstore.CheckAppend(&ev); err != nil {
		return err
	}
	err := s.appendOnce(ctx, fence, ev)
	if s.retryFor <= 0 || !errors.Is(err, eventstore.ErrUnavailable) {
		return err
	}
	// WithRetryFor: the database cannot be reached; try again until it can, the time
	// runs out or ctx ends. A commit whose answer was lost is found again as a repeat.
	until := time.Now().Add(s.retryFor)
	pause := retryBackoff
	for errors.Is(err, eventstore.ErrUnavailable) && time.Now().Add(pause).Before(until) {
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-s.closed:
			t.Stop()
			return eventstore.ErrClosed
		case <-t.C:
		}
		pause = min(2*pause, time.Second)
		err = s.appendOnce(ctx, fence, ev)
	}
	return err
}

// appendOnce is one try of Append, whose arguments are checked.
func (s *Store) appendOnce(ctx context.Context, fence eventstore.Fence, ev protocol.Event) error {
	if s.isClosed.Load() {
		return eventstore.ErrClosed
	}
	id := ev.ExecutionID
	if !storable(id) {
		return notFound(id)
	}
	op, foldErr := decodeFold(&ev)
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return s.fail(err, "append to %s", id)
	}
	defer rollback(tx)

	sec, nsec := splitTime(ev.Timestamp)
	var digest []byte
	if ev.Data != nil {
		sum := sha256.Sum256(ev.Data)
		digest = sum[:]
	}
	// The row lock, the repeat check against the event stored under ev.Sequence, and
	// what the fold needs of the part or call it changes, in one round trip.
	query, key := lockPlain, any(nil)
	if foldErr == nil {
		switch op.kind {
		case opText:
			query, key = lockPart, op.index
		case opStart, opArgs:
			query, key = lockCall, []byte(op.callID)
		}
	}
	var (
		last                 int64
		terminal, expired    bool
		same                 bool
		curFence             int64
		chunks, lastLen, idx *int32
	)
	args := []any{id, int64(min(ev.Sequence, math.MaxInt64)), []byte(ev.Type), sec, nsec, digest}
	if key != nil {
		args = append(args, key)
	}
	err = tx.QueryRow(ctx, s.sql(query), args...).Scan(&last, &terminal, &curFence, &expired, &same, &chunks, &lastLen, &idx)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return notFound(id)
	case err != nil:
		return s.fail(err, "append to %s", id)
	case expired:
		return notFound(id)
	case eventstore.Fence(curFence) != fence:
		return fmt.Errorf("append to %s: fence %d, current is %d: %w", id, fence, curFence, eventstore.ErrLeaseLost)
	case same:
		return nil // a repeat of the Append that stored it, terminal or not
	case terminal:
		return fmt.Errorf("append to %s: %w", id, eventstore.ErrTerminated)
	case ev.Sequence != uint64(last)+1:
		return fmt.Errorf("append to %s: sequence %d, next is %d: %w", id, ev.Sequence, last+1, eventstore.ErrSequence)
	case foldErr != nil:
		return fmt.Errorf("append to %s: event %d (%s): %w: %w", id, ev.Sequence, ev.Type, eventstore.ErrInvalid, foldErr)
	}

	b := &pgx.Batch{}
	b.Queue(s.sql(`INSERT INTO {s}.events (execution_id, seq, type, ts_s, ts_ns, data) VALUES ($1, $2, $3, $4, $5, $6)`),
		id, int64(ev.Sequence), []byte(ev.Type), sec, nsec, nullable(ev.Data))
	var retention *string
	if ev.Type.Terminal() {
		v := interval(s.retention)
		retention = &v
	}
	b.Queue(s.sql(`
		UPDATE {s}.executions SET last_seq = $2, updated_s = $3, updated_ns = $4, state = $5,
			output = output OR $6, output_bytes = output_bytes + $7,
			terminal = $8::interval IS NOT NULL,
			expires_at = statement_timestamp() + $8::interval
		WHERE id = $1`),
		id, int64(ev.Sequence), sec, nsec, string(op.state), op.output, op.outBytes, retention)
	s.queueFold(b, id, int64(ev.Sequence), &op, chunks, lastLen, idx)
	b.Queue("SELECT pg_notify($1, $2)", s.channel, id+":"+strconv.FormatUint(ev.Sequence, 10))
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return s.fail(err, "append to %s", id)
	}
	if err := tx.Commit(ctx); err != nil {
		return s.fail(err, "append to %s", id)
	}
	return nil
}

// The lock queries of Append: $1 id, $2 sequence, $3 type, $4 and $5 timestamp, $6 the
// SHA-256 of the data (NULL without data), and for a text or call its index or call
// id ($7). Each returns last_seq, terminal, lease_fence, whether the execution is past
// its retention, whether the event stored under $2 is this one and is the last, and the
// chunks, last chunk length and index of the part or call.
const (
	lockSelect = `
		SELECT e.last_seq, e.terminal, e.lease_fence, NOT ` + live + `,
			coalesce(l.seq = e.last_seq AND l.type = $3 AND l.ts_s = $4 AND l.ts_ns = $5
				AND (l.data IS NULL) = ($6::bytea IS NULL)
				AND (l.data IS NULL OR sha256(l.data) = $6::bytea), false),`
	lockFrom = `
		FROM {s}.executions e
		LEFT JOIN {s}.events l ON l.execution_id = e.id AND l.seq = $2`
	lockPlain = lockSelect + ` NULL::integer, NULL::integer, NULL::integer` + lockFrom + `
		WHERE e.id = $1 FOR UPDATE OF e`
	lockPart = lockSelect + ` p.chunks, p.last_len, p.idx` + lockFrom + `
		LEFT JOIN {s}.output_parts p ON p.execution_id = e.id AND p.idx = $7::integer
		WHERE e.id = $1 FOR UPDATE OF e`
	lockCall = lockSelect + ` p.chunks, p.last_len, p.idx` + lockFrom + `
		LEFT JOIN {s}.tool_calls p ON p.execution_id = e.id AND p.call_id = $7::bytea
		WHERE e.id = $1 FOR UPDATE OF e`
)

// queueFold queues the writes of op, the fold of event seq of execution id, beyond the
// execution row's sequence, state and output facts. For a text or call, chunks,
// lastLen and idx describe its row (nil when it has none yet).
func (s *Store) queueFold(b *pgx.Batch, id string, seq int64, op *foldOp, chunks, lastLen, idx *int32) {
	switch op.kind {
	case opText:
		if chunks == nil {
			b.Queue(s.sql(`INSERT INTO {s}.output_parts (execution_id, idx, type) VALUES ($1, $2, $3)`), id, op.index, []byte(op.partType))
			chunks, lastLen = new(int32), new(int32)
		}
		s.queueText(b, "output_parts", "idx = $2", id, textOutput, []byte(strconv.Itoa(op.index)), op.index, op.text, *chunks, *lastLen)
	case opStart:
		switch {
		case idx == nil:
			b.Queue(s.sql(`INSERT INTO {s}.tool_calls (execution_id, call_id, idx, ord, name) VALUES ($1, $2, $3, $4, $5)`),
				id, []byte(op.callID), op.index, seq, []byte(op.name))
		case int(*idx) != op.index:
			// Moved: last among the calls of its new index, as Apply reinserts it.
			b.Queue(s.sql(`UPDATE {s}.tool_calls SET idx = $3, ord = $4, name = $5 WHERE execution_id = $1 AND call_id = $2`),
				id, []byte(op.callID), op.index, seq, []byte(op.name))
		default:
			b.Queue(s.sql(`UPDATE {s}.tool_calls SET name = $3 WHERE execution_id = $1 AND call_id = $2`), id, []byte(op.callID), []byte(op.name))
		}
	case opArgs:
		if chunks == nil {
			// Apply keeps fragments that come before tool.call.started under index -1.
			b.Queue(s.sql(`INSERT INTO {s}.tool_calls (execution_id, call_id, idx, ord) VALUES ($1, $2, -1, $3)`), id, []byte(op.callID), seq)
			chunks, lastLen = new(int32), new(int32)
		}
		s.queueText(b, "tool_calls", "call_id = $2", id, textArgs, []byte(op.callID), []byte(op.callID), op.text, *chunks, *lastLen)
	case opResult:
		if op.result != nil {
			b.Queue(s.sql(`UPDATE {s}.executions SET result = $2 WHERE id = $1`), id, op.result)
		}
		if op.items != nil {
			b.Queue(s.sql(`INSERT INTO {s}.lists (execution_id, kind, seq, items) VALUES ($1, $2, $3, $4)`), id, listArtifs, seq, op.items)
		}
	case opUsage:
		if op.items != nil {
			b.Queue(s.sql(`INSERT INTO {s}.lists (execution_id, kind, seq, items) VALUES ($1, $2, $3, $4)`), id, listUsage, seq, op.items)
		}
	case opRoute:
		b.Queue(s.sql(`UPDATE {s}.executions SET attempts = attempts + 1, route = $2 WHERE id = $1`), id, op.route)
	case opCompleted:
		b.Queue(s.sql(`UPDATE {s}.executions SET finish_reason = $2 WHERE id = $1`), id, []byte(op.finish))
	case opFailed:
		b.Queue(s.sql(`UPDATE {s}.executions SET error = $2 WHERE id = $1`), id, op.failure)
	}
}

// queueText appends text to the chunked text (kind, key) whose owner row, in table with
// the condition match on $2 = owner, has chunks chunks, the last lastLen bytes long:
// to the last chunk while it stays within chunkBytes, else in a new chunk.
func (s *Store) queueText(b *pgx.Batch, table, match, id string, kind int16, key []byte, owner any, text []byte, chunks, lastLen int32) {
	if len(text) == 0 {
		return
	}
	if chunks > 0 && int(lastLen)+len(text) <= chunkBytes {
		b.Queue(s.sql(`UPDATE {s}.texts SET body = body || $5 WHERE execution_id = $1 AND kind = $2 AND key = $3 AND chunk = $4`),
			id, kind, key, chunks-1, text)
		b.Queue(s.sql(`UPDATE {s}.`+table+` SET last_len = last_len + $3 WHERE execution_id = $1 AND `+match),
			id, owner, int32(len(text)))
		return
	}
	b.Queue(s.sql(`INSERT INTO {s}.texts (execution_id, kind, key, chunk, body) VALUES ($1, $2, $3, $4, $5)`),
		id, kind, key, chunks, text)
	b.Queue(s.sql(`UPDATE {s}.`+table+` SET chunks = chunks + 1, last_len = $3 WHERE execution_id = $1 AND `+match),
		id, owner, int32(len(text)))
}

// Get implements eventstore.Log: one row by its primary key.
func (s *Store) Get(ctx context.Context, id string) (eventstore.Status, error) {
	if s.isClosed.Load() {
		return eventstore.Status{}, eventstore.ErrClosed
	}
	if !storable(id) {
		return eventstore.Status{}, notFound(id)
	}
	var (
		st                eventstore.Status
		cs, us, last      int64
		cns, uns          int32
		info, route, fail []byte
		remote            []byte
		state, owner      string
		fence             int64
		expires           *time.Time
		attempts          int32
	)
	err := s.pool.QueryRow(ctx, s.sql(`
		SELECT e.created_s, e.created_ns, e.info, e.idempotency_key, e.last_seq, e.updated_s, e.updated_ns,
			e.terminal, e.cancel_requested, e.state, e.attempts, e.route, e.error, e.output, e.output_bytes,
			e.lease_owner, e.lease_fence, e.lease_expires, e.remote
		FROM {s}.executions e WHERE e.id = $1 AND `+live), id).Scan(
		&cs, &cns, &info, &st.IdempotencyKey, &last, &us, &uns,
		&st.Terminal, &st.CancelRequested, &state, &attempts, &route, &fail, &st.Output, &st.OutputBytes,
		&owner, &fence, &expires, &remote)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return eventstore.Status{}, notFound(id)
	case err != nil:
		return eventstore.Status{}, s.fail(err, "get execution %s", id)
	}
	st.ID, st.CreatedAt, st.UpdatedAt = id, joinTime(cs, cns), joinTime(us, uns)
	st.Info, st.Remote = info, remote
	st.LastSequence, st.State, st.Attempts = uint64(last), protocol.Status(state), int(attempts)
	st.Lease = makeLease(owner, fence, expires)
	if route != nil {
		if err := json.Unmarshal(route, &st.Route); err != nil {
			return eventstore.Status{}, fmt.Errorf("get execution %s: stored route: %w", id, err)
		}
	}
	if fail != nil {
		if err := json.Unmarshal(fail, &st.Error); err != nil {
			return eventstore.Status{}, fmt.Errorf("get execution %s: stored error: %w", id, err)
		}
	}
	return st, nil
}

// Snapshot implements eventstore.Log: the execution's row and the rows of its output
// parts, tool calls, texts and lists, read in one repeatable-read transaction, so at
// one instant. Its cost grows with the snapshot's size: texts are read in chunks of
// about chunkBytes, never per event.
func (s *Store) Snapshot(ctx context.Context, id string) (protocol.Snapshot, error) {
	if s.isClosed.Load() {
		return protocol.Snapshot{}, eventstore.ErrClosed
	}
	if !storable(id) {
		return protocol.Snapshot{}, notFound(id)
	}
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return protocol.Snapshot{}, s.fail(err, "snapshot %s", id)
	}
	defer rollback(tx)
	snap, err := s.readSnapshot(ctx, tx, id)
	if err != nil {
		return protocol.Snapshot{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return protocol.Snapshot{}, s.fail(err, "snapshot %s", id)
	}
	return snap, nil
}

func (s *Store) readSnapshot(ctx context.Context, tx pgx.Tx, id string) (protocol.Snapshot, error) {
	b := &pgx.Batch{}
	b.Queue(s.sql(`SELECT e.last_seq, e.state, e.finish_reason, e.error, e.result FROM {s}.executions e WHERE e.id = $1 AND `+live), id)
	b.Queue(s.sql(`SELECT idx, type FROM {s}.output_parts WHERE execution_id = $1 ORDER BY idx`), id)
	b.Queue(s.sql(`SELECT call_id, idx, ord, name FROM {s}.tool_calls WHERE execution_id = $1`), id)
	b.Queue(s.sql(`SELECT kind, key, body FROM {s}.texts WHERE execution_id = $1 ORDER BY kind, key, chunk`), id)
	b.Queue(s.sql(`SELECT kind, items FROM {s}.lists WHERE execution_id = $1 ORDER BY kind, seq`), id)
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	snap := protocol.NewSnapshot(id)
	var (
		last         int64
		state        string
		failure, res []byte
	)
	var finish []byte
	err := br.QueryRow().Scan(&last, &state, &finish, &failure, &res)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return protocol.Snapshot{}, notFound(id)
	case err != nil:
		return protocol.Snapshot{}, s.fail(err, "snapshot %s", id)
	}
	snap.Sequence, snap.Status, snap.Result, snap.FinishReason = uint64(last), protocol.Status(state), res, string(finish)
	if failure != nil {
		if err := json.Unmarshal(failure, &snap.Error); err != nil {
			return protocol.Snapshot{}, fmt.Errorf("snapshot %s: stored error: %w", id, err)
		}
	}

	rows, _ := br.Query()
	parts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (protocol.OutputPart, error) {
		var p protocol.OutputPart
		var idx int32
		var typ []byte
		err := r.Scan(&idx, &typ)
		p.Index, p.Type = int(idx), string(typ)
		return p, err
	})
	if err != nil {
		return protocol.Snapshot{}, s.fail(err, "snapshot %s", id)
	}
	rows, _ = br.Query()
	calls, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (storedCall, error) {
		var c storedCall
		var idx int32
		var callID, name []byte
		err := r.Scan(&callID, &idx, &c.ord, &name)
		c.call.Index, c.call.CallID, c.call.Name = int(idx), string(callID), string(name)
		return c, err
	})
	if err != nil {
		return protocol.Snapshot{}, s.fail(err, "snapshot %s", id)
	}
	texts := map[int16]map[string]*bytes.Buffer{textOutput: {}, textArgs: {}}
	rows, _ = br.Query()
	var (
		kind int16
		key  []byte
		body []byte
	)
	_, err = pgx.ForEachRow(rows, []any{&kind, &key, &body}, func() error {
		m := texts[kind]
		if m == nil {
			return fmt.Errorf("text kind %d: %w", kind, errCorrupt)
		}
		t := m[string(key)]
		if t == nil {
			t = new(bytes.Buffer)
			m[string(key)] = t
		}
		t.Write(body)
		return nil
	})
	if err != nil {
		return protocol.Snapshot{}, s.fail(err, "snapshot %s", id)
	}
	rows, _ = br.Query()
	var items []byte
	_, err = pgx.ForEachRow(rows, []any{&kind, &items}, func() error {
		if kind == listUsage {
			return appendList(&snap.Usage, items)
		}
		return appendList(&snap.Artifacts, items)
	})
	if err != nil {
		return protocol.Snapshot{}, s.fail(err, "snapshot %s", id)
	}

	for i := range parts {
		if t := texts[textOutput][strconv.Itoa(parts[i].Index)]; t != nil {
			parts[i].Text = t.String()
		}
	}
	snap.Output = append(snap.Output, parts...)
	for i := range calls {
		if t := texts[textArgs][calls[i].call.CallID]; t != nil {
			calls[i].call.Arguments = t.String()
		}
	}
	snap.ToolCalls = append(snap.ToolCalls, sortCalls(calls)...)
	return snap, nil
}

// errCorrupt reports stored data this package cannot have written.
var errCorrupt = errors.New("unexpected stored data")

// appendList decodes a JSON array stored in lists and appends its elements to dst.
func appendList[T any](dst *[]T, list []byte) error {
	var items []T
	if err := json.Unmarshal(list, &items); err != nil {
		return err
	}
	*dst = append(*dst, items...)
	return nil
}

// Read implements eventstore.Log: pages of at most readPage events, each one statement
// that also checks that the execution exists, so that an execution removed during a
// read is never read as empty. Events never change once recorded, so the pages add up
// to the log as it was when the last of them was read.
func (s *Store) Read(ctx context.Context, id string, after uint64, limit int) ([]protocol.Event, error) {
	if s.isClosed.Load() {
		return nil, eventstore.ErrClosed
	}
	if !storable(id) {
		return nil, notFound(id)
	}
	var out []protocol.Event
	for {
		count := readPage
		if limit > 0 {
			count = min(count, limit-len(out))
		}
		page, err := s.readPage(ctx, id, after, count)
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if len(page) < count || (limit > 0 && len(out) == limit) {
			return out, nil
		}
		after = page[len(page)-1].Sequence
	}
}

func (s *Store) readPage(ctx context.Context, id string, after uint64, count int) ([]protocol.Event, error) {
	rows, err := s.pool.Query(ctx, s.sql(`
		SELECT l.seq, l.type, l.ts_s, l.ts_ns, l.data
		FROM (SELECT e.id FROM {s}.executions e WHERE e.id = $1 AND `+live+`) x
		LEFT JOIN LATERAL (
			SELECT seq, type, ts_s, ts_ns, data FROM {s}.events
			WHERE execution_id = x.id AND seq > $2 ORDER BY seq LIMIT $3) l ON true
		ORDER BY l.seq`), id, int64(min(after, math.MaxInt64)), count)
	if err != nil {
		return nil, s.fail(err, "read %s", id)
	}
	var (
		out   []protocol.Event
		found bool
		seq   *int64
		typ   []byte
		ts    *int64
		tns   *int32
		data  []byte
	)
	_, err = pgx.ForEachRow(rows, []any{&seq, &typ, &ts, &tns, &data}, func() error {
		found = true
		if seq == nil {
			return nil // the execution, without events after `after`
		}
		out = append(out, protocol.Event{ExecutionID: id, Sequence: uint64(*seq), Timestamp: joinTime(*ts, *tns),
			Type: protocol.EventType(typ), Data: json.RawMessage(data)})
		data = nil // the next row scans into a buffer of its own
		return nil
	})
	switch {
	case err != nil:
		return nil, s.fail(err, "read %s", id)
	case !found:
		return nil, notFound(id)
	}
	return out, nil
}

// Remove implements eventstore.Log: deleting the row removes everything of the
// execution (ON DELETE CASCADE), and the wake-up tells its waiters.
func (s *Store) Remove(ctx context.Context, id string) error {
	if s.isClosed.Load() {
		return eventstore.ErrClosed
	}
	if !storable(id) {
		return nil // never stored
	}
	tag, err := s.pool.Exec(ctx, s.sql(`
		WITH gone AS (DELETE FROM {s}.executions WHERE id = $1 AND terminal RETURNING id)
		SELECT pg_notify($2, id || ':removed') FROM gone`), id, s.channel)
	if err != nil {
		return s.fail(err, "remove %s", id)
	}
	if tag.RowsAffected() > 0 {
		return nil
	}
	var running bool
	err = s.pool.QueryRow(ctx, s.sql(`SELECT true FROM {s}.executions e WHERE e.id = $1 AND NOT e.terminal`), id).Scan(&running)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil // unknown or removed: done already
	case err != nil:
		return s.fail(err, "remove %s", id)
	}
	return fmt.Errorf("remove %s: %w", id, eventstore.ErrNotTerminal)
}

// nullable is b for a bytea parameter: NULL for nil, and an empty value for empty.
func nullable(b []byte) any {
	if b == nil {
		return nil
	}
	return b
}

// scanLease scans the lease columns (owner, fence, expires).
func scanLease(row pgx.Row) (eventstore.Lease, error) {
	var (
		owner   string
		fence   int64
		expires *time.Time
	)
	if err := row.Scan(&owner, &fence, &expires); err != nil {
		return eventstore.Lease{}, err
	}
	return makeLease(owner, fence, expires), nil
}

// makeLease is the Lease of the stored columns: zero for a never-leased execution.
func makeLease(owner string, fence int64, expires *time.Time) eventstore.Lease {
	l := eventstore.Lease{Owner: owner, Fence: eventstore.Fence(fence)}
	if expires != nil {
		l.Expires = *expires
	}
	return l
}
