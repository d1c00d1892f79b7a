-- 0001: the tables of every role (spec/postgres.md, "Tables"). Applied once, inside the
-- migration transaction, with search_path set to the store's schema; plain CREATE
-- statements, so that a second application would fail rather than pass unnoticed.

-- One row per execution: its record, its folded status and the non-text parts of its
-- snapshot, its lease and its cancel request. Instants the runtime gives (created_at,
-- updated_at, event timestamps) are kept exactly as seconds and nanoseconds since the
-- Unix epoch; instants of the database clock (leases, expiries) are timestamptz.
-- Strings that come out of events (types, call ids, names, finish reasons) are bytea:
-- text refuses NUL and invalid UTF-8, which an event's JSON may well decode to.
CREATE TABLE executions (
    id               text PRIMARY KEY,
    created_s        bigint NOT NULL,
    created_ns       integer NOT NULL,
    info             bytea,
    idempotency_key  text NOT NULL DEFAULT '',
    last_seq         bigint NOT NULL DEFAULT 0,
    updated_s        bigint NOT NULL,
    updated_ns       integer NOT NULL,
    terminal         boolean NOT NULL DEFAULT false,
    expires_at       timestamptz,                -- end of retention, set by the terminal event
    cancel_requested boolean NOT NULL DEFAULT false,
    state            text NOT NULL DEFAULT 'accepted',
    attempts         integer NOT NULL DEFAULT 0,
    route            bytea,                      -- JSON of the last route.selected
    error            bytea,                      -- JSON of execution.failed's error
    finish_reason    bytea NOT NULL DEFAULT '',
    result           bytea,                      -- the latest output.result's result
    output           boolean NOT NULL DEFAULT false,
    output_bytes     bigint NOT NULL DEFAULT 0,
    lease_owner      text NOT NULL DEFAULT '',
    lease_fence      bigint NOT NULL DEFAULT 0,
    lease_expires    timestamptz,
    remote           bytea
);

-- The orphan index: leased, running executions by lease expiry.
CREATE INDEX executions_orphans ON executions (lease_expires, id)
    WHERE NOT terminal AND lease_fence > 0;
-- The retention sweep: terminal executions by the end of their retention.
CREATE INDEX executions_expiry ON executions (expires_at) WHERE expires_at IS NOT NULL;

-- The log: gap-free sequences per execution, the primary key its order.
CREATE TABLE events (
    execution_id text NOT NULL REFERENCES executions (id) ON DELETE CASCADE,
    seq          bigint NOT NULL,
    type         bytea NOT NULL,
    ts_s         bigint NOT NULL,
    ts_ns        integer NOT NULL,
    data         bytea,
    PRIMARY KEY (execution_id, seq)
);

-- The snapshot's output parts and tool calls, with how their text is chunked (texts).
CREATE TABLE output_parts (
    execution_id text NOT NULL REFERENCES executions (id) ON DELETE CASCADE,
    idx          integer NOT NULL,
    type         bytea NOT NULL,
    chunks       integer NOT NULL DEFAULT 0,   -- rows in texts
    last_len     integer NOT NULL DEFAULT 0,   -- bytes in the last of them
    PRIMARY KEY (execution_id, idx)
);

CREATE TABLE tool_calls (
    execution_id text NOT NULL REFERENCES executions (id) ON DELETE CASCADE,
    call_id      bytea NOT NULL,
    idx          integer NOT NULL,
    ord          bigint NOT NULL,              -- sequence of the event that last (re)placed it
    name         bytea NOT NULL DEFAULT '',
    chunks       integer NOT NULL DEFAULT 0,
    last_len     integer NOT NULL DEFAULT 0,
    PRIMARY KEY (execution_id, call_id)
);

-- The text of output parts (kind 0, key: the output index) and the arguments of tool
-- calls (kind 1, key: the call id), in chunks of bounded size: a delta appends to the
-- last chunk or starts a new one, so its cost does not grow with the text.
CREATE TABLE texts (
    execution_id text NOT NULL REFERENCES executions (id) ON DELETE CASCADE,
    kind         smallint NOT NULL,
    key          bytea NOT NULL,
    chunk        integer NOT NULL,
    body         bytea NOT NULL,
    PRIMARY KEY (execution_id, kind, key, chunk)
);

-- The usage entries (kind 0) and artifacts (kind 1) of each event that reported some,
-- as the event's JSON array.
CREATE TABLE lists (
    execution_id text NOT NULL REFERENCES executions (id) ON DELETE CASCADE,
    kind         smallint NOT NULL,
    seq          bigint NOT NULL,
    items        bytea NOT NULL,
    PRIMARY KEY (execution_id, kind, seq)
);

-- Idempotency reservations, counted per scope (reservations_scope).
CREATE TABLE reservations (
    key          text PRIMARY KEY,
    scope        text NOT NULL,
    fingerprint  text NOT NULL,
    execution_id text NOT NULL,
    response     bytea,
    created_s    bigint NOT NULL,
    created_ns   integer NOT NULL,
    created      boolean NOT NULL DEFAULT false,
    expires_at   timestamptz NOT NULL
);
CREATE INDEX reservations_scope ON reservations (scope, expires_at);
CREATE INDEX reservations_expiry ON reservations (expires_at);

CREATE TABLE secrets (
    name       text PRIMARY KEY,
    value      bytea NOT NULL,
    expires_at timestamptz NOT NULL
);

-- Budget counters; a row whose expires_at has passed counts as absent.
CREATE TABLE budget_counters (
    name       text PRIMARY KEY,
    value      bigint NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE INDEX budget_counters_expiry ON budget_counters (expires_at);

-- What each execution holds: its last Hold's holds (JSON), when, and its note.
CREATE TABLE budget_holds (
    execution_id text PRIMARY KEY,
    holds        bytea NOT NULL,
    since        timestamptz NOT NULL,
    note         bytea
);
CREATE INDEX budget_holds_since ON budget_holds (since, execution_id);
