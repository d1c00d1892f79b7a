package redis

import goredis "github.com/redis/go-redis/v9"

// Every operation that reads state and then writes depending on it is one Lua script, so
// it is atomic against every other replica without WATCH/MULTI retries. All keys a
// script touches carry the execution's hash tag (or are a single key), so the scripts
// also run on Redis Cluster. go-redis runs them with EVALSHA and falls back to EVAL
// (which caches them again) after a restart of Redis has dropped the script cache.
//
// Optional values (Info, Data, Response) are passed as a trailing argument that is left
// out when the Go value is nil, so that nil and empty survive a round trip unchanged.
//
// A script that writes may run twice for one call: go-redis sends a command again after
// a read timeout or a broken connection (MaxRetries), whether or not Redis ran it the
// first time, and a caller may retry a call whose answer it never got. So every such
// script recognises a repeat of its own completed write, reports the same success as
// the first run and writes nothing more. Without that, a lost reply to an Append would
// turn into ErrSequence for an event that is stored, and the engine could never record
// its terminal event. (Cancel and Release are idempotent as they are.)

// createScript registers an execution unless its meta hash exists.
//
// KEYS: meta, stream. ARGV: created_at, orphan ttl in ms (0: none), [info].
// Returns 1 if created, or if the meta hash holds this very record already (the same
// created_at, and the same info or no info like this call): a repeat. 0 if the
// execution exists with another record.
var createScript = goredis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then
  local cur = redis.call('HMGET', KEYS[1], 'created_at', 'info')
  if cur[1] == ARGV[1] and cur[2] == (ARGV[3] or false) then
    return 1
  end
  return 0
end
-- A stream without its meta hash can only be a leftover (the two expire together);
-- a new execution must start empty or its first XADD would be rejected.
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[1], 'created_at', ARGV[1], 'updated_at', ARGV[1], 'last_sequence', '0')
if #ARGV >= 3 then
  redis.call('HSET', KEYS[1], 'info', ARGV[3])
end
if ARGV[2] ~= '0' then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
`)

// appendScript appends one event after checking that it is the next one.
//
// KEYS: meta, stream. ARGV: sequence, type, timestamp, terminal ('1' or '0'), retention
// in ms, orphan ttl in ms (0: none), wake channel, cancel channel, [data].
// Returns 0 if appended (or a repeat, see below), -1 if the execution is unknown, -2 if
// it is terminal, or else the sequence that would have been next.
//
// The stream entry id is the sequence itself (<sequence>-0), so Redis orders the stream
// by sequence and XRANGE can start at any cursor directly. Nothing is written before
// every check has passed, so a rejected append leaves no trace.
//
// An event identical to the last one stored (the same sequence, and the same type,
// timestamp and data, present or absent, in its stream entry) is this append run
// again: it returns 0 and writes nothing. That check comes before the terminal one,
// since a repeated terminal event finds the execution terminal by its own first run.
var appendScript = goredis.NewScript(`
local state = redis.call('HMGET', KEYS[1], 'last_sequence', 'terminal')
if not state[1] then
  return -1
end
if state[1] == ARGV[1] then
  local entry = redis.call('XRANGE', KEYS[2], ARGV[1] .. '-0', ARGV[1] .. '-0')[1]
  if entry then
    local stored = {}
    local fields = entry[2]
    for i = 1, #fields, 2 do
      stored[fields[i]] = fields[i + 1]
    end
    if stored['type'] == ARGV[2] and stored['timestamp'] == ARGV[3] and stored['data'] == ARGV[9] then
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
if #ARGV >= 9 then
  redis.call('XADD', KEYS[2], ARGV[1] .. '-0', 'type', ARGV[2], 'timestamp', ARGV[3], 'data', ARGV[9])
else
  redis.call('XADD', KEYS[2], ARGV[1] .. '-0', 'type', ARGV[2], 'timestamp', ARGV[3])
end
redis.call('HSET', KEYS[1], 'last_sequence', ARGV[1], 'updated_at', ARGV[3])
if ARGV[4] == '1' then
  redis.call('HSET', KEYS[1], 'terminal', '1')
  -- Both keys get the same absolute expiry (time is frozen while a script runs), so
  -- no reader ever sees one without the other.
  redis.call('PEXPIRE', KEYS[1], ARGV[5])
  redis.call('PEXPIRE', KEYS[2], ARGV[5])
  -- The terminal event also ends every WaitCancel.
  redis.call('PUBLISH', ARGV[8], 'terminal')
elseif ARGV[6] ~= '0' then
  redis.call('PEXPIRE', KEYS[1], ARGV[6])
  redis.call('PEXPIRE', KEYS[2], ARGV[6])
end
redis.call('PUBLISH', ARGV[7], ARGV[1])
return 0
`)

// readScript returns stream entries from a first id on, in one step with the existence
// check, so that an execution expiring between the two is never read as empty.
//
// KEYS: meta, stream. ARGV: first entry id, count (0: all).
// Returns nil if the execution is unknown, else the XRANGE reply.
var readScript = goredis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then
  return false
end
if ARGV[2] == '0' then
  return redis.call('XRANGE', KEYS[2], ARGV[1], '+')
end
return redis.call('XRANGE', KEYS[2], ARGV[1], '+', 'COUNT', ARGV[2])
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

// reserveScript stores a reservation unless one exists, and returns the existing one
// otherwise: one step, so every caller racing for a key sees the same winner. An expired
// key counts as absent even before Redis reclaims it.
//
// KEYS: reservation. ARGV: ttl in ms, fingerprint, execution id, created_at, [response].
// Returns 1 if stored, else whether the existing reservation is this one (1 or 0), its
// fingerprint, execution id, created_at and response (nil when the stored response was
// nil). An existing reservation with the same fingerprint and execution id is this call's
// own, stored by an earlier run of it: it counts as reserved, and its
// ttl is left as the first run set it.
var reserveScript = goredis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then
  local cur = redis.call('HMGET', KEYS[1], 'fingerprint', 'execution_id', 'created_at', 'response')
  local mine = 0
  if cur[1] == ARGV[2] and cur[2] == ARGV[3] then
    mine = 1
  end
  return {mine, cur[1], cur[2], cur[3], cur[4]}
end
redis.call('HSET', KEYS[1], 'fingerprint', ARGV[2], 'execution_id', ARGV[3], 'created_at', ARGV[4])
if #ARGV >= 5 then
  redis.call('HSET', KEYS[1], 'response', ARGV[5])
end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
`)

// releaseScript deletes a reservation only if it still names the execution: a compare
// and delete, so a late Release cannot remove a newer owner's reservation.
//
// KEYS: reservation. ARGV: execution id. Returns the number of keys deleted.
var releaseScript = goredis.NewScript(`
if redis.call('HGET', KEYS[1], 'execution_id') == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)
