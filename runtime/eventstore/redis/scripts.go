package redis

import (
	"strconv"

	goredis "github.com/redis/go-redis/v9"
)

// Every operation that reads state and then writes depending on it is one Lua script, so
// it is atomic against every other replica without WATCH/MULTI retries. All keys a
// script touches carry the execution's hash tag (or are a single key), so the scripts
// also run on Redis Cluster — except the two of reservations, which touch a reservation
// and its scope's index in two slots: the count must change in the same step as what it
// counts, and reservations keep the key names that replicas of the previous version
// read during a rolling update (Redis Cluster is not supported: spec/redis.md). go-redis
// runs them with EVALSHA and falls back to EVAL (which caches them again) after a
// restart of Redis has dropped the script cache.
//
// Leases live in the meta hash (lease_owner, lease_fence, lease_expires) and every
// lease check is made in the script that writes: a fence that is not lease_fence (a
// missing field is NoFence, 0) refuses the write. Lease expiry is measured on the clock
// of Redis itself (TIME, in milliseconds), the same for every replica; Redis replicates
// a script's effects rather than the script (the only mode since Redis 7), so a script
// may read the time before it writes. The orphan index is kept outside the scripts
// (see leases.go).
//
// Optional values (Info, Response) are passed as a trailing argument that is left out
// when the Go value is nil, and Data with a flag beside it, so that nil and empty
// survive a round trip unchanged.
//
// A script that writes may run twice for one call: go-redis sends a command again after
// a read timeout or a broken connection (MaxRetries), whether or not Redis ran it the
// first time, and a caller may retry a call whose answer it never got. So every such
// script recognises a repeat of its own completed write, reports the same success as
// the first run and writes nothing more. Without that, a lost reply to an Append would
// turn into ErrSequence for an event that is stored, and the engine could never record
// its terminal event. (Cancel, Release, Renew, ReleaseLease and SetRemote are
// idempotent as they are: a second run sets the same values, or a later expiry.)
// Acquire carries a token of its own call for that purpose: a second run finds the
// lease it took and returns it rather than ErrLeaseHeld.

// nowMS is the Lua function now_ms(), the Redis server's time in milliseconds since the
// epoch, and ms(x), which formats such a number as an integer (Lua numbers are floats,
// which Redis would not always print as integers).
const nowMS = `
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function ms(x)
  return string.format('%.0f', x)
end
`

// maxCarriedBytes bounds the data of an event its wake-up carries. Every subscribed
// replica's pub/sub connection receives what an append publishes, and Redis drops a
// connection whose unread messages pass its client-output-buffer-limit for pub/sub
// (32 MiB by default): a burst of large events carried whole could reach that. A larger
// event's wake-up is the sequence alone, and its readers Read it.
const maxCarriedBytes = 64 << 10

// orphanExpiry is the Lua function orphan_expiry(now, ttl): the instant, in ms as
// formatted by ms(), until which a running execution's keys are kept when written at now
// with the orphan ttl. It is an eighth of the ttl beyond it, so that the appends of the
// next eighth of the ttl find every key kept long enough already and set no expiry (see
// appendScript).
const orphanExpiry = `
local function orphan_expiry(now, ttl)
  return ms(now + ttl + math.floor(ttl / 8))
end
`

// createScript registers an execution unless its meta hash exists, leased to an owner
// if it has one, and notes the reservation it was created for.
//
// KEYS: meta, stream, keys, created (see Create). ARGV: created_at, orphan ttl in ms (0:
// none), owner (empty: unleased), lease ttl in ms, idempotency key (empty: none), ttl
// in ms of the created key (0: not written), [info].
// Returns {1, owner, fence, expires} if created, with the new lease (an empty owner and
// '0' for an unleased one); {2, owner, fence, expires} with the current lease if the
// meta hash holds this very record already (the same created_at, and the same info or
// no info like this call): a repeat; {0} if the execution exists with another record.
var createScript = goredis.NewScript(nowMS + orphanExpiry + `
local function lease(code)
  local l = redis.call('HMGET', KEYS[1], 'lease_owner', 'lease_fence', 'lease_expires')
  return {code, l[1] or '', l[2] or '0', l[3] or '0'}
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  local cur = redis.call('HMGET', KEYS[1], 'created_at', 'info')
  if cur[1] == ARGV[1] and cur[2] == (ARGV[7] or false) then
    return lease(2)
  end
  return {0}
end
-- Other keys without the meta hash can only be leftovers (none outlives it); a new
-- execution must start empty or its first XADD would be rejected and its snapshot
-- would hold another's output.
for _, k in ipairs(redis.call('SMEMBERS', KEYS[3])) do
  redis.call('DEL', k)
end
redis.call('DEL', KEYS[2], KEYS[3])
redis.call('HSET', KEYS[1], 'created_at', ARGV[1], 'updated_at', ARGV[1], 'last_sequence', '0')
if #ARGV >= 7 then
  redis.call('HSET', KEYS[1], 'info', ARGV[7])
end
if ARGV[5] ~= '' then
  redis.call('HSET', KEYS[1], 'idempotency_key', ARGV[5])
end
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[1], 'lease_owner', ARGV[3], 'lease_fence', '1',
    'lease_expires', ms(now_ms() + tonumber(ARGV[4])))
end
if ARGV[6] ~= '0' then
  redis.call('SET', KEYS[4], ARGV[5], 'PX', ARGV[6])
end
if ARGV[2] ~= '0' then
  local expires = orphan_expiry(now_ms(), tonumber(ARGV[2]))
  redis.call('HSET', KEYS[1], 'orphan_expires', expires)
  redis.call('PEXPIREAT', KEYS[1], expires)
end
return lease(1)
`)

// appendScript appends one event after checking that it is the next one, and folds it
// into the execution's status and result snapshot in the same step.
//
// KEYS: meta, stream, keys. ARGV: sequence, type, timestamp, terminal ('1' or '0'),
// retention in ms, orphan ttl in ms (0: none), wake channel, cancel channel, has data
// ('1' or '0'), data (empty without), key base ('<prefix>{<id>}:'), fence, state after
// the event, fold operation and its operands (see fold.go).
// Returns 0 if appended (or a repeat, see below), -1 if the execution is unknown, -2 if
// it is terminal, -3 if its data does not decode (operation 'invalid'), -4 if the fence
// is not the current one, or else the sequence that would have been next.
//
// The fence is checked first (after existence), as the Store interface orders it: even
// a repeat is refused once another replica acquired the lease, since the writer must
// stop either way; whether its event is stored, its log tells.
//
// The stream entry id is the sequence itself (<sequence>-0), so Redis orders the stream
// by sequence and XRANGE can start at any cursor directly. Nothing is written before
// every check has passed, so a rejected append leaves no trace.
//
// An event identical to the last one stored (the same sequence, and the same type,
// timestamp and data, present or absent, in its stream entry) is this append run
// again: it returns 0 and writes nothing, so it folds nothing either. That check comes
// before the terminal one, since a repeated terminal event finds the execution terminal
// by its own first run.
//
// The fold writes only what the event changes, each with a command whose cost is that
// of the change: APPEND to the text of one output index or the arguments of one call,
// HSET of small fields, RPUSH of one event's usage or artifacts. An output or tool
// event also adds its output bytes to output_bytes in the meta hash, which it creates:
// the field's presence tells that output was recorded. Tool calls are numbered
// in the meta hash (tool_calls); a call's entry in the calls hash packs "<number>
// <index> <order> <name>", where order is the sequence of the event that last
// (re)inserted it, which is how protocol.Snapshot.Apply orders calls of equal index.
//
// The keys of output indexes and calls are named here from the key base, since only
// the script knows a call's number; they carry the execution's hash tag, so they are in
// the slot of the declared keys, as Redis Cluster requires. Every key the fold creates
// is recorded in the keys set, so that the terminal event can give all of them the
// retention. While it runs, every key of the execution expires at one instant, the meta
// hash's orphan_expires (see orphanExpiry), so that no reader ever finds some without the
// others: a key created by an append gets that expiry, and an append made less than the
// orphan ttl before it moves it, for every key. An execution is so kept at least the
// orphan ttl after its last write, and an append costs no expiry command unless it
// creates a key, where refreshing every key's ttl cost one per key touched.
//
// The wake-up it publishes is "<sequence> event" ("<sequence> terminal" for a terminal
// event), then, for an event whose data is at most maxCarriedBytes, a newline and the
// event as stored: type, newline, timestamp, newline, the has-data flag and the data
// (see hub.go, which hands it to readers).
var appendScript = goredis.NewScript(nowMS + orphanExpiry +
	"local max_carried = " + strconv.Itoa(maxCarriedBytes) + "\n" + `
local state = redis.call('HMGET', KEYS[1], 'last_sequence', 'terminal', 'lease_fence', 'orphan_expires', 'output_bytes')
if not state[1] then
  return -1
end
if (state[3] or '0') ~= ARGV[12] then
  return -4
end
local data = false
if ARGV[9] == '1' then
  data = ARGV[10]
end
if state[1] == ARGV[1] then
  local entry = redis.call('XRANGE', KEYS[2], ARGV[1] .. '-0', ARGV[1] .. '-0')[1]
  if entry then
    local stored = {}
    local fields = entry[2]
    for i = 1, #fields, 2 do
      stored[fields[i]] = fields[i + 1]
    end
    if stored['type'] == ARGV[2] and stored['timestamp'] == ARGV[3] and (stored['data'] or false) == data then
      return 0
    end
  end
end
if state[2] then
  return -2
end
local nextSeq = tonumber(state[1]) + 1
if tonumber(ARGV[1]) ~= nextSeq then
  return nextSeq
end
local op = ARGV[14]
if op == 'invalid' then
  return -3
end
if data then
  redis.call('XADD', KEYS[2], ARGV[1] .. '-0', 'type', ARGV[2], 'timestamp', ARGV[3], 'data', data)
else
  redis.call('XADD', KEYS[2], ARGV[1] .. '-0', 'type', ARGV[2], 'timestamp', ARGV[3])
end
-- The output bytes an output or tool event adds: the length of its text, fragment or
-- result.
local out = false
if op == 'text' then
  out = #ARGV[17]
elseif op == 'args' then
  out = #ARGV[16]
elseif op == 'result' then
  out = #ARGV[15]
elseif op == 'start' then
  out = 0
end
if out then
  redis.call('HSET', KEYS[1], 'last_sequence', ARGV[1], 'updated_at', ARGV[3], 'state', ARGV[13],
    'output_bytes', ms(tonumber(state[5] or '0') + out))
else
  redis.call('HSET', KEYS[1], 'last_sequence', ARGV[1], 'updated_at', ARGV[3], 'state', ARGV[13])
end

local base = ARGV[11]
local created = {} -- keys beyond meta, stream and keys the fold may have created
-- push appends value to list and returns the keys it created.
local function push(list, value)
  if redis.call('RPUSH', list, value) == 1 then
    return {list}
  end
  return {}
end
if op == 'text' then
  local parts, text = base .. 'parts', base .. 'text:' .. ARGV[15]
  if redis.call('HSETNX', parts, ARGV[15], ARGV[16]) == 1 then
    created = {parts, text}
  end
  redis.call('APPEND', text, ARGV[17])
elseif op == 'start' or op == 'args' then
  local calls = base .. 'calls'
  local cur = redis.call('HGET', calls, ARGV[15])
  local n, index, order, name
  if cur then
    n, index, order, name = string.match(cur, '^(%d+) (%S+) (%d+) (.*)$')
  else
    -- Apply keeps fragments that come before tool.call.started under index -1.
    n, index, order, name = redis.call('HINCRBY', KEYS[1], 'tool_calls', 1), '-1', ARGV[1], ''
    created = {calls}
  end
  if op == 'start' then
    if not cur or index ~= ARGV[16] then
      index, order = ARGV[16], ARGV[1] -- new or moved: last among the calls of its index
    end
    redis.call('HSET', calls, ARGV[15], n .. ' ' .. index .. ' ' .. order .. ' ' .. ARGV[17])
  else
    if not cur then
      redis.call('HSET', calls, ARGV[15], n .. ' ' .. index .. ' ' .. order .. ' ' .. name)
    end
    local args = base .. 'args:' .. n
    if not cur then
      created[#created + 1] = args
    end
    redis.call('APPEND', args, ARGV[16])
  end
elseif op == 'result' then
  if ARGV[15] ~= '' then
    redis.call('HSET', KEYS[1], 'result', ARGV[15])
  end
  if ARGV[16] ~= '' then
    created = push(base .. 'artifacts', ARGV[16])
  end
elseif op == 'usage' then
  if ARGV[15] ~= '' then
    created = push(base .. 'usage', ARGV[15])
  end
elseif op == 'route' then
  redis.call('HINCRBY', KEYS[1], 'attempts', 1)
  redis.call('HSET', KEYS[1], 'route', ARGV[15])
elseif op == 'completed' then
  if ARGV[15] ~= '' then
    redis.call('HSET', KEYS[1], 'finish_reason', ARGV[15])
  end
elseif op == 'failed' then
  if ARGV[15] ~= '' then
    redis.call('HSET', KEYS[1], 'error', ARGV[15])
  end
end
for _, k in ipairs(created) do
  redis.call('SADD', KEYS[3], k)
end

if ARGV[4] == '1' then
  redis.call('HSET', KEYS[1], 'terminal', '1')
  -- Every key gets the same absolute expiry (time is frozen while a script runs), so
  -- no reader ever sees one without the others.
  for _, k in ipairs(redis.call('SMEMBERS', KEYS[3])) do
    redis.call('PEXPIRE', k, ARGV[5])
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[5])
  redis.call('PEXPIRE', KEYS[2], ARGV[5])
  redis.call('PEXPIRE', KEYS[3], ARGV[5])
  -- The terminal event also ends every WaitCancel, with the answer it gives.
  if redis.call('HEXISTS', KEYS[1], 'cancel_requested') == 1 then
    redis.call('PUBLISH', ARGV[8], 'cancel')
  else
    redis.call('PUBLISH', ARGV[8], 'terminal')
  end
elseif ARGV[6] ~= '0' then
  local now, ttl = now_ms(), tonumber(ARGV[6])
  local expires = state[4]
  if tonumber(expires or '0') - now < ttl then
    -- Also an execution created before orphan_expires existed, whose keys each had
    -- their own ttl.
    expires = orphan_expiry(now, ttl)
    redis.call('HSET', KEYS[1], 'orphan_expires', expires)
    for _, k in ipairs(redis.call('SMEMBERS', KEYS[3])) do
      redis.call('PEXPIREAT', k, expires)
    end
    redis.call('PEXPIREAT', KEYS[1], expires)
    redis.call('PEXPIREAT', KEYS[2], expires)
    redis.call('PEXPIREAT', KEYS[3], expires)
  else
    if nextSeq == 1 then
      redis.call('PEXPIREAT', KEYS[2], expires) -- the first XADD created the stream
    end
    if #created > 0 then
      for _, k in ipairs(created) do
        redis.call('PEXPIREAT', k, expires)
      end
      redis.call('PEXPIREAT', KEYS[3], expires) -- the keys set may be new too
    end
  end
end
-- Wake-ups announce the sequence, whether it ends the execution, and carry the event
-- itself (see hub.go).
local head = ARGV[1] .. ' event'
if ARGV[4] == '1' then
  head = ARGV[1] .. ' terminal'
end
if #(data or '') <= max_carried then
  redis.call('PUBLISH', ARGV[7], head .. '\n' .. ARGV[2] .. '\n' .. ARGV[3] .. '\n' .. ARGV[9] .. (data or ''))
else
  redis.call('PUBLISH', ARGV[7], head)
end
return 0
`)

// snapshotScript reads an execution's status fields and folded output in one step, so
// that the snapshot is that of one instant: the state after its last_sequence.
//
// The texts of output parts and tool calls are returned as they are while they hold
// at most a byte budget together; a text beyond it is returned as its key and length
// instead, for the caller to read with GETRANGE (see Store.Snapshot), so that the
// script never copies a large output through Lua. That text is the prefix of that
// length of what the key holds later: a text is only ever appended to.
//
// KEYS: meta. ARGV: key base ('<prefix>{<id>}:'), byte budget.
// Returns nil if the execution is unknown, else {last_sequence, state, finish_reason,
// error, result, parts, calls, usage, artifacts}: parts as (index, type, text) triples,
// calls as (call id, packed entry, arguments) triples, where a text may be {key,
// length}, usage and artifacts as lists of JSON arrays (see decodeSnapshot). Missing
// fields are nil.
var snapshotScript = goredis.NewScript(`
local m = redis.call('HMGET', KEYS[1], 'last_sequence', 'state', 'finish_reason', 'error', 'result')
if not m[1] then
  return false
end
local base, budget = ARGV[1], tonumber(ARGV[2])
local function text(key)
  local n = redis.call('STRLEN', key)
  if n > budget then
    return {key, n}
  end
  budget = budget - n
  return redis.call('GET', key) or ''
end
local parts = redis.call('HGETALL', base .. 'parts')
local out = {}
for i = 1, #parts, 2 do
  out[#out + 1] = parts[i]
  out[#out + 1] = parts[i + 1]
  out[#out + 1] = text(base .. 'text:' .. parts[i])
end
local calls = redis.call('HGETALL', base .. 'calls')
local tc = {}
for i = 1, #calls, 2 do
  local n = string.match(calls[i + 1], '^(%d+) ')
  tc[#tc + 1] = calls[i]
  tc[#tc + 1] = calls[i + 1]
  tc[#tc + 1] = text(base .. 'args:' .. n)
end
return {m[1], m[2], m[3], m[4], m[5], out, tc,
  redis.call('LRANGE', base .. 'usage', 0, -1),
  redis.call('LRANGE', base .. 'artifacts', 0, -1)}
`)

// cancelScript records a cancel request and wakes the execution's WaitCancel callers.
//
// KEYS: meta. ARGV: cancel channel.
// Returns 0 if recorded, -1 if the execution is unknown, -2 if it is terminal.
var cancelScript = goredis.NewScript(`
local state = redis.call('HMGET', KEYS[1], 'last_sequence', 'terminal')
if not state[1] then
  return -1
end
if state[2] then
  return -2
end
redis.call('HSET', KEYS[1], 'cancel_requested', '1')
redis.call('PUBLISH', ARGV[1], 'cancel')
return 0
`)

// removeScript removes a terminal execution: every key it lists in its keys set, its
// events and its meta hash, as their expiry at the end of retention would. The created
// key stays: it lasts as long as the execution's idempotency reservation, which outlives
// a removal as it outlives retention (see Create). Nobody waits on a terminal execution
// (Wait and WaitCancel answer it at once), so there is no one to wake.
//
// KEYS: meta, stream, keys.
// Returns 0 if removed or unknown (a repeat of a removal finds nothing), -1 if the
// execution is not terminal.
var removeScript = goredis.NewScript(`
local state = redis.call('HMGET', KEYS[1], 'last_sequence', 'terminal')
if not state[1] then
  return 0
end
if not state[2] then
  return -1
end
for _, k in ipairs(redis.call('SMEMBERS', KEYS[3])) do
  redis.call('DEL', k)
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
return 0
`)

// reserveScript stores a reservation unless one exists, and returns the existing one
// otherwise: one step, so every caller racing for a key sees the same winner. An expired
// key counts as absent even before Redis reclaims it.
//
// The scope's index is a sorted set of the scope's reservations scored by their expiry
// in ms on the Redis clock, which the reservation's own PEXPIRE runs on too: its members
// after the expired ones are removed are the scope's count, in the same step as the
// reservation is stored, whichever replica reserves. A member is the SHA-1 of the
// reservation's key, 40 bytes where the key may take 300. The index expires with its
// latest member, so a scope that reserves no more leaves nothing behind.
//
// KEYS: reservation, the scope's index. ARGV: ttl in ms, fingerprint, execution id,
// created_at, scope, limit (0: none), [response].
// Returns 1 if stored; {-1, ms} if the scope holds limit reservations, the earliest of
// which expires in ms; else whether the existing reservation is this one (1 or 0), its
// fingerprint, execution id, created_at, response (nil when the stored response was
// nil) and scope (nil for a reservation of an earlier version, which stored none). An
// existing reservation with the same fingerprint and execution id is this call's own,
// stored by an earlier run of it: it counts as reserved, and its ttl is left as the
// first run set it.
var reserveScript = goredis.NewScript(nowMS + `
if redis.call('EXISTS', KEYS[1]) == 1 then
  local cur = redis.call('HMGET', KEYS[1], 'fingerprint', 'execution_id', 'created_at', 'response', 'scope')
  local mine = 0
  if cur[1] == ARGV[2] and cur[2] == ARGV[3] then
    mine = 1
  end
  return {mine, cur[1], cur[2], cur[3], cur[4], cur[5]}
end
local now = now_ms()
local ttl = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ms(now))
local limit = tonumber(ARGV[6])
if limit > 0 and redis.call('ZCARD', KEYS[2]) >= limit then
  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  return {-1, tonumber(first[2]) - now}
end
redis.call('HSET', KEYS[1], 'fingerprint', ARGV[2], 'execution_id', ARGV[3], 'created_at', ARGV[4], 'scope', ARGV[5])
if #ARGV >= 7 then
  redis.call('HSET', KEYS[1], 'response', ARGV[7])
end
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('ZADD', KEYS[2], ms(now + ttl), redis.sha1hex(KEYS[1]))
if redis.call('PTTL', KEYS[2]) < ttl then
  redis.call('PEXPIRE', KEYS[2], ttl)
end
return 1
`)

// releaseScript deletes a reservation only if it still names the execution: a compare
// and delete, so a late Release cannot remove a newer owner's reservation. It takes the
// reservation out of its scope's index in the same step.
//
// KEYS: reservation, [the index of the scope it was stored with]. ARGV: execution id.
// Returns the number of keys deleted.
var releaseScript = goredis.NewScript(`
if redis.call('HGET', KEYS[1], 'execution_id') ~= ARGV[1] then
  return 0
end
if #KEYS >= 2 then
  redis.call('ZREM', KEYS[2], redis.sha1hex(KEYS[1]))
end
return redis.call('DEL', KEYS[1])
`)

// acquireScript takes the lease of an execution unless an unexpired lease is held on
// it, with the fence one more than the current one.
//
// KEYS: meta. ARGV: owner, ttl in ms, token (unique to the Acquire call).
// Returns {0, owner, fence, expires} with the new lease, {-1} if the execution is
// unknown, {-2} if it is terminal, {-3, owner, expires} with the unexpired lease held.
// A run that finds the lease taken with its own token is a repeat of the run that
// took it: it returns that lease again (the holder may have renewed it since).
var acquireScript = goredis.NewScript(nowMS + `
local m = redis.call('HMGET', KEYS[1], 'last_sequence', 'terminal', 'lease_owner',
  'lease_fence', 'lease_expires', 'lease_token')
if not m[1] then
  return {-1}
end
if m[6] == ARGV[3] then
  return {0, m[3], m[4], m[5]}
end
if m[2] then
  return {-2}
end
local now = now_ms()
if m[5] and tonumber(m[5]) > now then
  return {-3, m[3], m[5]}
end
local fence = redis.call('HINCRBY', KEYS[1], 'lease_fence', 1)
local expires = ms(now + tonumber(ARGV[2]))
redis.call('HSET', KEYS[1], 'lease_owner', ARGV[1], 'lease_expires', expires, 'lease_token', ARGV[3])
return {0, ARGV[1], tostring(fence), expires}
`)

// renewScript extends the lease with a fence to ttl from now, expired or not, as long
// as the fence is current.
//
// KEYS: meta. ARGV: fence, ttl in ms.
// Returns {0, owner, fence, expires} with the renewed lease, {-1} if the execution is
// unknown, {-4, current fence} if the fence is not current, {-2} if it is terminal.
var renewScript = goredis.NewScript(nowMS + `
local m = redis.call('HMGET', KEYS[1], 'last_sequence', 'terminal', 'lease_owner', 'lease_fence')
if not m[1] then
  return {-1}
end
if (m[4] or '0') ~= ARGV[1] then
  return {-4, m[4] or '0'}
end
if m[2] then
  return {-2}
end
local expires = ms(now_ms() + tonumber(ARGV[2]))
redis.call('HSET', KEYS[1], 'lease_expires', expires)
return {0, m[3], m[4], expires}
`)

// releaseLeaseScript lets go of the lease with a fence: its expiry becomes now unless
// it is earlier already.
//
// KEYS: meta. ARGV: fence.
// Returns {0, expires} with the lease's expiry after the release, {-1} if the execution
// is unknown, {-4, current fence} if the fence is not current, {-2} if it is terminal
// (nothing changed).
var releaseLeaseScript = goredis.NewScript(nowMS + `
local m = redis.call('HMGET', KEYS[1], 'last_sequence', 'terminal', 'lease_fence', 'lease_expires')
if not m[1] then
  return {-1}
end
if (m[3] or '0') ~= ARGV[1] then
  return {-4, m[3] or '0'}
end
if m[2] then
  return {-2}
end
local now = now_ms()
if tonumber(m[4]) <= now then
  return {0, m[4]}
end
redis.call('HSET', KEYS[1], 'lease_expires', ms(now))
return {0, ms(now)}
`)

// setRemoteScript records or clears an execution's remote job handle, fenced like
// appendScript.
//
// KEYS: meta. ARGV: fence, [handle] (absent: clear).
// Returns 0 if recorded, -1 if the execution is unknown, -4 if the fence is not
// current, -2 if it is terminal.
var setRemoteScript = goredis.NewScript(`
local m = redis.call('HMGET', KEYS[1], 'last_sequence', 'terminal', 'lease_fence')
if not m[1] then
  return -1
end
if (m[3] or '0') ~= ARGV[1] then
  return -4
end
if m[2] then
  return -2
end
if #ARGV >= 2 then
  redis.call('HSET', KEYS[1], 'remote', ARGV[2])
else
  redis.call('HDEL', KEYS[1], 'remote')
end
return 0
`)

// orphansScript lists the orphan index's entries that are due on the Redis clock: a
// read of the index key alone (see leases.go).
//
// KEYS: leases. ARGV: limit.
// Returns {now in ms, {ids of the entries scored at or before now, earliest first, at
// most limit}}.
var orphansScript = goredis.NewScript(nowMS + `
local now = ms(now_ms())
return {now, redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, ARGV[1])}
`)

// Budgets (see budgets.go). An execution's holds are a hash: count, then counter:<i>,
// unit:<i> and amount:<i> for i in 1..count, since (µs on the Redis clock) and note
// when it has one; fields rather than JSON, so that counter names stay the bytes they
// are. Counter values are decimal integers, which Lua reads as doubles: exact up to
// eventstore.MaxAmount, which the argument checks enforce for each amount.
//
// The counters an execution held before are found from its holds record, inside the
// script, so their keys are formed there from the counter key base (ARGV[1]) rather
// than passed as KEYS: every budget key carries the hash tag {budgets}, so they are all
// in the slot of the keys the script is given.

// nowUS is the Lua function now_us(), the Redis server's time in microseconds since
// the epoch: the store's clock for PendingHold.Since, fine enough to order holds made
// in the same millisecond.
const nowUS = `
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
`

// heldBy is the Lua function held(key), the holds of the hash at key as a list of
// {counter, unit, amount}, empty when there is none.
const heldBy = `
local function held(key)
  local n = tonumber(redis.call('HGET', key, 'count') or '0')
  local hs = {}
  for i = 1, n do
    local f = redis.call('HMGET', key, 'counter:' .. i, 'unit:' .. i, 'amount:' .. i)
    hs[i] = {f[1], f[2], tonumber(f[3])}
  end
  return hs
end
`

// holdScript replaces an execution's holds, all or nothing: each new counter's value
// less what the execution held on it before, plus the new amount, must stay within its
// limit (none when <= 0); only then are the old holds given back (never below 0, and
// not to a counter that expired), the new amounts added, each counter's expiry moved
// to the hold's when that is later, and the holds recorded with their time and note,
// and filed in the pending index. A second run of one call finds its own holds and
// replaces them with the same ones.
//
// KEYS: holds, pending, the counter of each hold. ARGV: counter key base, execution
// id, then for each hold counter, unit, amount, limit, expiry in ms; [note].
// Returns {1} if held, or {0, index of the first hold that did not fit (from 0), that
// counter's value}.
var holdScript = goredis.NewScript(nowMS + nowUS + heldBy + `
local n = #KEYS - 2
local prev = held(KEYS[1])
local back = {}
for _, h in ipairs(prev) do
  back[ARGV[1] .. h[1]] = h[3]
end
local values = {}
for i = 1, n do
  local a = 5 * i - 2
  local used = tonumber(redis.call('GET', KEYS[2 + i]) or '0')
  local v = math.max(used - (back[KEYS[2 + i]] or 0), 0) + tonumber(ARGV[a + 2])
  local limit = tonumber(ARGV[a + 3])
  if limit > 0 and v > limit then
    return {0, i - 1, used}
  end
  values[i] = v
end
for _, h in ipairs(prev) do
  local key = ARGV[1] .. h[1]
  local cur = redis.call('GET', key)
  if cur then
    redis.call('SET', key, ms(math.max(tonumber(cur) - h[3], 0)), 'KEEPTTL')
  end
end
redis.call('DEL', KEYS[1])
for i = 1, n do
  local a = 5 * i - 2
  local expires = tonumber(ARGV[a + 4])
  redis.call('SET', KEYS[2 + i], ms(values[i]), 'KEEPTTL')
  if redis.call('PEXPIRETIME', KEYS[2 + i]) < expires then
    redis.call('PEXPIREAT', KEYS[2 + i], ms(expires))
  end
  redis.call('HSET', KEYS[1], 'counter:' .. i, ARGV[a], 'unit:' .. i, ARGV[a + 1], 'amount:' .. i, ARGV[a + 2])
end
if n == 0 then
  redis.call('ZREM', KEYS[2], ARGV[2])
  return {1}
end
local now = ms(now_us())
redis.call('HSET', KEYS[1], 'count', n, 'since', now)
if #ARGV > 5 * n + 2 then
  redis.call('HSET', KEYS[1], 'note', ARGV[#ARGV])
end
redis.call('ZADD', KEYS[2], now, ARGV[2])
return {1}
`)

// settleScript ends an execution's holds: each held counter that still exists is
// changed by what was spent in its unit less what was held, never below 0, and the
// holds and their pending entry are deleted, in one step, so that of two replicas
// settling one execution only one finds its holds.
//
// KEYS: holds, pending. ARGV: counter key base, execution id, then unit and amount
// spent, for each unit spent.
// Returns 1 if the execution held anything, else 0.
var settleScript = goredis.NewScript(nowMS + heldBy + `
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
local spent = {}
for i = 3, #ARGV, 2 do
  spent[ARGV[i]] = tonumber(ARGV[i + 1])
end
for _, h in ipairs(held(KEYS[1])) do
  local key = ARGV[1] .. h[1]
  local cur = redis.call('GET', key)
  if cur then
    redis.call('SET', key, ms(math.max(tonumber(cur) + (spent[h[2]] or 0) - h[3], 0)), 'KEEPTTL')
  end
end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[2])
return 1
`)

// pendingScript lists the pending index's executions held since before a time, with
// the time and note of their holds, in one consistent read.
//
// KEYS: pending. ARGV: the time in µs (exclusive), limit, holds key base.
// Returns {id, since in µs, note (nil when none)} for each, oldest first.
var pendingScript = goredis.NewScript(`
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[1], 'LIMIT', 0, ARGV[2])
local out = {}
for i, id in ipairs(ids) do
  local f = redis.call('HMGET', ARGV[3] .. id, 'since', 'note')
  out[i] = {id, f[1], f[2]}
end
return out
`)
