-- fire: planned -> planned, one occurrence on. When a schedule's occurrence has come due
-- (its job is due now and the delay worker claims it as any other), the next occurrence's
-- job is written and the schedule moves on to it, in this one step. It happens only if the
-- schedule is still at the occurrence the caller read (ARGV[2]): of any number of delay
-- workers that saw it due, one moves it; the others get "moved". A worker killed before
-- this step leaves it to the next pass of any worker; no lock, no leader.
-- KEYS[1] schedules zset                dq:{Q}:schedules
-- KEYS[2] the schedule's hash           dq:{Q}:schedule:<name>
-- KEYS[3] scheduled zset                dq:{Q}:scheduled
-- KEYS[4] specs bucket prefix           dq:{Q}:specs:
-- KEYS[5] job hash prefix               dq:{Q}:job:
-- ARGV[1] the schedule's name
-- ARGV[2] the occurrence ms the caller found it at
-- ARGV[3] the next occurrence ms
-- ARGV[4] the next occurrence's job id
-- ARGV[5] occurrences missed (not run) between the two, to count
-- ARGV[6] "skip" to remove the due occurrence's job when it was never claimed (missed="skip":
--         it is too late to run), else ""
-- ARGV[7] wake channel
-- ARGV[8] wake horizon ms
-- ARGV[9] a trace context (checked by the caller: docs/tracing.md) that the occurrence which
--         came due keeps, when it runs, was never claimed and keeps none yet; or ""
-- Returns {"fired", the occurrence's job id, 1 if it will run else 0} or {"moved", next ms
-- or ""} (another worker moved it, it is paused, or it is gone).
-- #include _now.lua
-- #include _types.lua
-- #include _bounds.lua
-- #include _occurrence.lua
local bad = wrong_type({KEYS[1], 'zset', KEYS[2], 'hash', KEYS[3], 'zset'})
if bad then return bad end
local f = redis.call('HMGET', KEYS[2], 'next', 'job', 'spec', 'paused', 'lim')
if not f[1] or f[1] ~= ARGV[2] or f[4] then return {'moved', f[1] or ''} end
local due = number_in(ARGV[3], MIN_TIME_MS, MAX_TIME_MS)
if not due or not f[3] or not is_spec(f[3]) then
  return redis.error_reply('ERR fire: a bad next occurrence, or the schedule has no spec')
end
local runs = 1
if ARGV[6] == 'skip' and drop_occurrence(KEYS[3], KEYS[4], KEYS[5], f[2]) then runs = 0 end
local missed = (tonumber(ARGV[5]) or 0) + (1 - runs)
if runs == 1 and ARGV[9] and ARGV[9] ~= '' then
  trace_occurrence(KEYS[4], KEYS[5], f[2], ARGV[9])
end
write_occurrence(KEYS[3], KEYS[4], KEYS[5], ARGV[4], f[3], due, ARGV[7], now_ms(),
                 tonumber(ARGV[8]) or 0, f[5])
local fields = {'next', due, 'job', ARGV[4]}
if runs == 1 then
  fields[#fields + 1] = 'last'
  fields[#fields + 1] = f[1]
  fields[#fields + 1] = 'last_job'
  fields[#fields + 1] = f[2]
  redis.call('HINCRBY', KEYS[2], 'fired', 1)
end
if missed > 0 then redis.call('HINCRBY', KEYS[2], 'missed_n', missed) end
redis.call('HSET', KEYS[2], unpack(fields))
redis.call('ZADD', KEYS[1], due, ARGV[1])
return {'fired', f[2] or '', runs}
