package jobs

import (
	"strings"

	"github.com/redis/go-redis/v9"
)

// createScript writes a new job atomically: the idempotency record (when
// KEYS[4] is given and free: the job id, and the request fingerprint in
// KEYS[5]), the hash, the "queued" event and the queue entry. A taken
// idempotency key returns its stored value and the stored fingerprint (""
// when none) and writes nothing — unless the key still holds ARGV[9], a
// record the caller found naming a job that is gone, and that job's hash
// (KEYS[6]) is still gone: such a record is replaced as if free.
//
// KEYS: job hash, events stream, queue stream, [idempotency key, fingerprint key,
// [hash of the job a stale record names]]
// ARGV: id, task, payload, now_ms, ttl_s, request fingerprint, queue maxlen
// (0: no trimming, the normal case; finished entries are deleted by the
// worker, see transitionScript), capture stream ("" none: see captureLua),
// stale record to replace ("" none), idempotency key as the client gave it
// (for IdempotencyJobKey)
//
// Redis does not roll a script back: a command failing halfway keeps what
// was written before it, say a job hash and event with no queue entry, a
// job queued for ever. So every command that could fail comes before the
// first write, is the first write, or is taken back by the script before
// it fails. Keys of another type are refused with the reply "wrongtype",
// key, type (see luaWrongType). A taken idempotency key whose fingerprint
// key holds another type is refused too, since its request cannot be
// compared.
//
// The event is the first write, made with redis.pcall, so that out of
// memory fails the create with nothing written. Its capture entry comes
// next: a capture stream that refuses it (its last possible id used) has
// the event taken back (see captureLua). The queue entry comes last of the
// three, also with redis.pcall: a queue stream that refuses it (another
// type, its last possible id used) has the capture entry and the event
// taken back, and only then is its type looked at. A refused capture
// stream has it looked at too, so a queue of another type is named first
// whichever check fails first. The queue entry is the one write never
// taken back: deleting an entry ahead of the workers' group leaves Redis
// 7's entries-added counting it and the group's entries-read never, so
// its lag (see Backlog) would count a job too many from then on, and the
// trim of a queue cap (ARGV[7]) could not be undone. An emptied capture
// stream may be left behind; its readers take it for a missing one. The
// types of the job's own hash and events stream are not looked at: they
// are named by an id just drawn at random, which no key can hold yet, and
// each TYPE saved is a call every create would pay for.
//
// Whether the job hash exists is looked at first, though (EXISTS): the
// client resends a command whose reply did not come in time (a read
// timeout, a dropped connection) although Redis may have run it, and a
// second run would queue the job twice, to run twice. A hash whose
// created_ts and task are this call's and that holds the ids this call
// wrote (field queuedIDsField) is this call's: those ids are answered, as
// the first run answered, and nothing is written. Any other key is
// another job's under an id drawn twice (reply "collision"): nothing is
// written, and the caller draws another id.
var createScript = redis.NewScript(`
redis.replicate_commands()
` + luaWrongType + `
if redis.call('EXISTS', KEYS[1]) == 1 then
  local prior = redis.pcall('HMGET', KEYS[1], 'created_ts', 'task', '` + queuedIDsField + `')
  local ev, msg
  if not prior['err'] and prior[1] == ARGV[4] and prior[2] == ARGV[2] and prior[3] then
    ev, msg = string.match(prior[3], '^(%S+) (%S+)$')
  end
  if ev then return {'created', ev, msg} end
  return {'collision'}
end
local w
if #KEYS >= 5 then
  w = wrongtype(KEYS[4], 'string', KEYS[6] or '', 'hash')
  if w then return w end
  local prev = redis.call('GET', KEYS[4])
  local stale = prev and #KEYS >= 6 and prev == ARGV[9] and
    (redis.call('HGET', KEYS[6], 'status') or '') == ''
  if prev and not stale then
    w = wrongtype(KEYS[5], 'string')
    if w then return w end
    return {'duplicate', prev, redis.call('GET', KEYS[5]) or ''}
  end
end
w = wrongtype(ARGV[8], 'stream')
if w then return wrongtype(KEYS[3], 'stream') or w end
local ev = redis.pcall('XADD', KEYS[2], '*', 'type', 'queued', 'ts', ARGV[4],
  'step', 'gateway.enqueue', 'data', '{}')
if type(ev) == 'table' then return wrongtype(KEYS[3], 'stream') or ev end
` + captureLua("ARGV[8]", "ARGV[1]", "ev", "'queued'", "'gateway.enqueue'", "ARGV[4]", "ARGV[2]", "'{}'",
	"redis.call('DEL', KEYS[2]) return wrongtype(KEYS[3], 'stream') or captured") + `
local msg
if tonumber(ARGV[7]) > 0 then
  msg = redis.pcall('XADD', KEYS[3], 'MAXLEN', '~', ARGV[7], '*', 'job_id', ARGV[1], 'task', ARGV[2], 'payload', ARGV[3])
else
  msg = redis.pcall('XADD', KEYS[3], '*', 'job_id', ARGV[1], 'task', ARGV[2], 'payload', ARGV[3])
end
if type(msg) == 'table' then
  if captured then redis.call('XDEL', ARGV[8], captured) end
  redis.call('DEL', KEYS[2])
  return wrongtype(KEYS[3], 'stream') or msg
end
if #KEYS >= 5 then
  redis.call('SET', KEYS[4], ARGV[1], 'EX', ARGV[5])
  redis.call('SET', KEYS[5], ARGV[6], 'EX', ARGV[5])
  redis.call('SET', '` + idempotencyJobPrefix + `' .. ARGV[1], ARGV[10], 'EX', ARGV[5])
end
redis.call('HSET', KEYS[1], 'job_id', ARGV[1], 'task', ARGV[2], 'payload', ARGV[3],
  'status', 'queued', 'created_ts', ARGV[4], 'updated_ts', ARGV[4], 'ttl_s', ARGV[5],
  'result', '', 'error', '', '` + queuedIDsField + `', ev .. ' ' .. msg,
  '` + HasIdempotencyField + `', #KEYS >= 5 and '1' or '0')
redis.call('EXPIRE', KEYS[1], ARGV[5])
redis.call('EXPIRE', KEYS[2], ARGV[5])
return {'created', ev, msg}
`)

// transitionScript is every write after creation. It refuses unless the
// current status is one of the allowed sources, then adds the event,
// updates the hash, refreshes both TTLs from the hash's ttl_s (and those
// of the job's idempotency record, see IdempotencyJobKey and
// HasIdempotencyField), publishes a cancel and acknowledges the queue
// message as asked. The message is also
// acknowledged when the job is gone or already terminal, since there is
// nothing left to do for it.
//
// As in createScript, every command that could fail comes before the
// first write or is the first write, since a script is not rolled back: a
// terminal status stored without its event, or an event whose
// acknowledgement fails, would be a half-done transition. The hash is
// read with redis.pcall (status, ttl_s, task, the tokens of its last
// writes, below, and HasIdempotencyField, in one HMGET) and the
// event is the first write, also with redis.pcall; a job hash or events
// key holding another type answers "corrupt" with both types, which are
// looked at only when a call or a check failed or the transition is
// refused (the events key is not written then), and are answered before
// any other key's type: the job's own damage is for good, so a worker
// ends its message (ErrUnknownStatus) whatever else is wrong. Another
// failure of the event's XADD (its last possible id used, out of memory)
// is returned as Redis's error, with nothing written; so is a capture
// stream refusing the entry, the event taken back (see captureLua), which
// is why the hash is written after the capture. An events stream the
// taken-back event leaves empty and without a TTL is one that event
// created (the job's own stream always has one, so it was deleted by
// hand): it is deleted too, or nothing would ever remove it. The queue
// stream (when a message is to be acknowledged) and the capture stream
// are checked before the first write (reply "wrongtype", key, type), and
// a message id is checked by prepare, so XACK cannot fail after the
// status changed. The refresh of the idempotency record's TTL is best effort: a record or back-reference of
// another type, or a ttl_s that is no whole number of seconds EXPIRE
// takes, skips it (redis.pcall) and the transition completes, since
// refusing it would keep a job from ever finishing over a key that only
// serves retries. An acknowledged message is then deleted (XACK, then
// XDEL): that is what keeps jobs:stream bounded, by removing exactly the
// finished entries and never one still pending or undelivered.
//
// Each write carries a token its caller drew (ARGV[13]): the client
// resends a command whose reply did not come in time (a read timeout, a
// dropped connection) although Redis may have run it, and a second run
// would write a second event — a delta's text twice, a second "running" —
// or refuse a finish that happened. The hash keeps the tokens of its last
// appliedKeep writes with their event ids (field appliedField, "token=id
// ..."); a token found there is answered {"ok", its event id}, as the
// first run was, and nothing is written, acknowledged or published. More
// than one is kept because a pipeline (ApplyBatch) is resent whole, with
// its other ops on the same job, and other writers may write the job
// between a run and its resend. Every transition reads and rewrites that
// field, so it is searched and trimmed by position with plain finds (a
// token holds no space or "=", so "token=" at the start or after a space
// is its entry) rather than split into tables, which cost Redis a few
// percent more CPU per job (docs/edge-workers.md).
//
// KEYS: job hash, events stream, queue stream
// ARGV: 1 new status ("" keeps it), 2 now_ms, 3 event type, 4 step, 5 data,
// 6 result ("" untouched), 7 error ("" untouched), 8 cancel channel ("" none),
// 9 queue message id to ack ("" none), 10 job id, 11 capture stream ("" none:
// see captureLua), 12 capture cap (0 none: see dropLua), 13 token ("" none),
// 14.. allowed current statuses
var transitionScript = redis.NewScript(`
redis.replicate_commands()
local function ack()
  if ARGV[9] ~= '' then
    redis.call('XACK', KEYS[3], '` + Group + `', ARGV[9])
    redis.call('XDEL', KEYS[3], ARGV[9])
  end
end
local function corrupt()
  local ht = redis.call('TYPE', KEYS[1])['ok']
  local et = redis.call('TYPE', KEYS[2])['ok']
  if (ht ~= 'hash' and ht ~= 'none') or (et ~= 'stream' and et ~= 'none') then
    return {'corrupt', ht .. '/' .. et}
  end
end
` + luaWrongType + `
local h = redis.pcall('HMGET', KEYS[1], 'status', 'ttl_s', 'task', '` + appliedField + `', '` + HasIdempotencyField + `')
if h['err'] then return corrupt() or h end
local w = ARGV[9] ~= '' and wrongtype(KEYS[3], 'stream')
if w then return corrupt() or w end
local cur = h[1]
if not cur then
  w = corrupt()
  if w then return w end
  ack() return {'missing', ''}
end
local applied = h[4] or ''
if ARGV[13] ~= '' and applied ~= '' then
  local key, at = ARGV[13] .. '=', 0
  repeat
    at = string.find(applied, key, at + 1, true)
    if at and (at == 1 or string.byte(applied, at - 1) == 32) then
      return {'ok', string.match(applied, '^(%S+)', at + #key)}
    end
  until not at
end
local allowed = false
for i = 14, #ARGV do
  if ARGV[i] == cur then allowed = true break end
end
if not allowed then
  w = corrupt()
  if w then return w end
  if ` + luaTerminalTest("cur") + ` then ack() end
  return {'refused', cur}
end
w = wrongtype(ARGV[11], 'stream')
if w then return corrupt() or w end
local drop = ARGV[11] ~= '' and ARGV[3] == '` + CaptureDroppable + `' and tonumber(ARGV[12]) > 0 and
  redis.call('XLEN', ARGV[11]) >= tonumber(ARGV[12])
if drop then
  w = wrongtype(ARGV[11] .. '` + dropsSuffix + `', 'hash', ARGV[11] .. '` + droppedTotalSuffix + `', 'string')
  if w then return corrupt() or w end
end
local id = redis.pcall('XADD', KEYS[2], '*', 'type', ARGV[3], 'ts', ARGV[2], 'step', ARGV[4], 'data', ARGV[5])
if type(id) == 'table' then return corrupt() or id end
if drop then
` + dropLua("ARGV[11]", "ARGV[10]", "id", "ARGV[2]") + `
else
` + captureLua("ARGV[11]", "ARGV[10]", "id", "ARGV[3]", "ARGV[4]", "ARGV[2]", "h[3] or ''", "ARGV[5]",
	"redis.call('XDEL', KEYS[2], id) "+
		"if redis.call('XLEN', KEYS[2]) == 0 and redis.call('TTL', KEYS[2]) == -1 then redis.call('DEL', KEYS[2]) end "+
		"return captured") + `
end
local set = {'updated_ts', ARGV[2]}
if ARGV[1] ~= '' then set[#set + 1] = 'status' set[#set + 1] = ARGV[1] end
if ARGV[6] ~= '' then set[#set + 1] = 'result' set[#set + 1] = ARGV[6] end
if ARGV[7] ~= '' then set[#set + 1] = 'error' set[#set + 1] = ARGV[7] end
if ARGV[13] ~= '' then
  local entry = ARGV[13] .. '=' .. id
  if applied ~= '' then
    local n, at = 1, 0
    repeat at = string.find(applied, ' ', at + 1, true) if at then n = n + 1 end until not at
    for _ = 1, n - (` + appliedKeepLua + ` - 1) do applied = string.sub(applied, string.find(applied, ' ', 1, true) + 1) end
    entry = applied .. ' ' .. entry
  end
  set[#set + 1] = '` + appliedField + `' set[#set + 1] = entry
end
redis.call('HSET', KEYS[1], unpack(set))
local ttl = h[2]
if ttl and #ttl <= 10 and string.match(ttl, '^[1-9]%d*$') then
  redis.call('EXPIRE', KEYS[1], ttl)
  redis.call('EXPIRE', KEYS[2], ttl)
  local back = '` + idempotencyJobPrefix + `' .. ARGV[10]
  local ik = h[5] ~= '0' and redis.pcall('GET', back)
  if type(ik) == 'string' then
    redis.call('EXPIRE', back, ttl)
    if redis.pcall('GET', '` + idempotencyPrefix + `' .. ik) == ARGV[10] then
      redis.call('EXPIRE', '` + idempotencyPrefix + `' .. ik, ttl)
      redis.call('EXPIRE', '` + idempotencyFingerprintPrefix + `' .. ik, ttl)
    end
  end
end
if ARGV[8] ~= '' then redis.call('PUBLISH', ARGV[8], ARGV[10]) end
ack()
return {'ok', id}
`)

// luaWrongType defines wrongtype(key, type, ...): for each pair whose key
// is not "" and exists with another type than the one given (as TYPE
// names it), the reply {"wrongtype", key, its type}, else nil. Scripts
// call it before their first write, since Redis does not roll a script
// back: a WRONGTYPE raised halfway keeps every write made before it.
const luaWrongType = `local function wrongtype(...)
  local a = {...}
  for i = 1, #a, 2 do
    if a[i] ~= '' then
      local t = redis.call('TYPE', a[i])['ok']
      if t ~= a[i + 1] and t ~= 'none' then return {'wrongtype', a[i], t} end
    end
  end
end`

// captureLua renders the capture of one event: when the capture stream
// (a Lua expression, "" meaning off) is set, the event just written to
// job:{id}:events is appended to it too, in the same script, so no crash
// can write an event without capturing it. The entry carries what the
// sync shipper needs and the contract's event lacks: the job id, the
// events-stream entry id (the event's stable identity) and the job's task.
// The capture stream is named in ARGV rather than KEYS so that the
// scripts' key layout stays the contract's; the edge runs on one Redis
// server, never a cluster.
//
// The scripts checked the stream's type before their first write, but a
// stream can still refuse an entry (its last possible id used): then undo
// (Lua statements ending in a return; the error is in captured) takes back
// what the script wrote before it, which the scripts keep to entries of
// streams no consumer group reads, and the script fails with Redis's
// error, so no event is left uncaptured. captured, the capture entry's id,
// stays in scope for a later write's undo.
func captureLua(stream, job, entry, typ, step, ts, task, data, undo string) string {
	return "local captured\n" +
		"if " + stream + " ~= '' then\n" +
		"  captured = redis.pcall('XADD', " + stream + ", '*', 'job_id', " + job +
		", 'entry', " + entry + ", 'type', " + typ + ", 'step', " + step + ", 'ts', " + ts +
		", 'task', " + task + ", 'data', " + data + ")\n" +
		"  if type(captured) == 'table' then " + undo + " end\n" +
		"end"
}

// dropLua renders the record of a delta not captured because the capture
// stream (a Lua expression) is at its cap: the job's field of the drops
// hash holds "first_entry first_ts last_entry last_ts count", opened by
// the first drop and extended by each later one, and the stream's drop
// total grows by one. Only drops are recorded, so the hot path stays one
// XLEN per delta; the script checked both keys' types before its first
// write.
//
// The times are the earliest and the latest of the drops, as the spool's
// gaps keep them: the edge's clock can step back, and central refuses a
// gap whose last_ts is before its first_ts. They are kept as the strings
// given, never formatted from a Lua number. The total is counted with
// pcall: a total that is not a number (written by hand) must not fail the
// script after the event is written, since Redis does not roll it back.
func dropLua(stream, job, entry, ts string) string {
	return "local dk = " + stream + " .. '" + dropsSuffix + "'\n" +
		"local dv = redis.call('HGET', dk, " + job + ")\n" +
		"local df, dts, dlts, dn\n" +
		"if dv then df, dts, dlts, dn = string.match(dv, '^(%S+) (%d+) %S+ (%d+) (%d+)$') end\n" +
		"if df then\n" +
		"  dn = tonumber(dn) + 1\n" +
		"  if tonumber(" + ts + ") < tonumber(dts) then dts = " + ts + " end\n" +
		"  if tonumber(" + ts + ") > tonumber(dlts) then dlts = " + ts + " end\n" +
		"else df, dts, dlts, dn = " + entry + ", " + ts + ", " + ts + ", 1 end\n" +
		"redis.call('HSET', dk, " + job + ", df .. ' ' .. dts .. ' ' .. " + entry + " .. ' ' .. dlts .. ' ' .. dn)\n" +
		"redis.pcall('INCR', " + stream + " .. '" + droppedTotalSuffix + "')"
}

// luaTerminalTest renders "v == 'done' or v == 'error' or ..." from the
// Transitions table so the script and the Go table cannot disagree.
func luaTerminalTest(v string) string {
	parts := make([]string, 0, len(Transitions.Terminal))
	for _, s := range Transitions.Terminal {
		parts = append(parts, v+" == '"+s+"'")
	}
	return strings.Join(parts, " or ")
}
