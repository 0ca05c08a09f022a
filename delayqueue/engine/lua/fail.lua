-- fail: inflight -> scheduled (after a backoff) or dead (attempts used up), after the task
-- raised. A stale token changes nothing. A job whose att or max is corrupt goes to dead.
-- KEYS[1] job hash                      dq:{Q}:job:<id>
-- KEYS[2] inflight zset                 dq:{Q}:inflight
-- KEYS[3] scheduled zset                dq:{Q}:scheduled
-- KEYS[4] dead zset                     dq:{Q}:dead
-- KEYS[5] dedupe hash                   dq:{Q}:keys
-- KEYS[6] this minute's stats hash      dq:{Q}:stats:<minute>
-- KEYS[7] job hash prefix               dq:{Q}:job:   (to trim the oldest dead jobs)
-- KEYS[8] specs bucket prefix, optional dq:{Q}:specs: (data older than the rule that a job
--         with a hash has no packed spec may have both: then the spec in its bucket, KEYS[8]
--         .. the id's last two characters, is the current one)
-- KEYS[9] limit state prefix, optional  dq:{Q}:limit:  (a limited job frees its slot: _limits.lua)
-- ARGV[1] job id
-- ARGV[2] fencing token
-- ARGV[3] backoff ms before the next attempt
-- ARGV[4] error ("ExcType: message")
-- ARGV[5] traceback
-- ARGV[6] max attempts when the job stores none
-- ARGV[7] most dead jobs kept
-- ARGV[8] stats ttl seconds
-- ARGV[9] wake channel
-- Carried, optional, after all of the above (a Django task's job: its attempt's outcome is
-- written first, as task_finished.lua writes it, whatever the fail then finds: one call
-- where there were two; engine/carried.settling_with):
--   KEYS[10] the job's results hash     dq:{Q}:result:<id>
--   ARGV[10] task_finished.lua's ARGV[1] (ttl s of the results hash), ARGV[11...] its
--            ARGV[2...] (field, value pairs)
-- Returns "retry", "dead" or "stale"; with KEYS[10], {that, task_finished.lua's reply (1) or
-- the text of the error it met}.
-- #include _now.lua
-- #include _bounds.lua
-- #include _types.lua
-- #include _spec.lua
-- #include _history.lua
-- #include _dedupe.lua
-- #include _stats.lua
-- #include _wake.lua
-- #include _limits.lua
local now = now_ms()
local id = ARGV[1]
local backoff = number_in(ARGV[3], 0, MAX_TIME_MS)
local default_max = max_attempts(ARGV[6], nil)
local dead_max = number_in(ARGV[7], 0, 1e12)
local ttl = number_in(ARGV[8], 1, 1e9)
if not (backoff and default_max and dead_max and ttl) then
  return redis.error_reply('ERR fail: bad backoff, max attempts, dead max or stats ttl')
end
local recorded  -- (nil: no results hash given)
if KEYS[10] then
  -- A Django task's outcome (only such a job pays for its helper's definition)
-- #include _task_finish.lua
  recorded = outcome_written(KEYS[10], 10)
end
local bad = wrong_type({KEYS[2], 'zset', KEYS[3], 'zset', KEYS[4], 'zset', KEYS[5], 'hash'})
if bad then return bad end
-- A job key that is not a hash holds no token: stale here, and reap sends it to dead.
local f = hash_fields(KEYS[1], 'tok', 'att', 'max', 'key', 'hist', 'task', 'lim', 'exp')
if not f or f[1] ~= ARGV[2] then return recorded and {'stale', recorded} or 'stale' end
-- (A bucket that is not a hash holds no spec: the hash's fields are the job's.)
local bucket = KEYS[8] and spec_bucket(KEYS[8], id)
local parts = bucket and split_spec(bucket_spec(bucket, id) or '')
if parts then
  f[3] = parts[4] ~= '' and parts[4]
  f[4] = spec_key(parts)
end
local attempt = counter(f[2])
local max = max_attempts(f[3], default_max)
local why
if not (attempt and max) then
  why = 'corrupt job data: att or max is not an integer in bounds'
elseif attempt >= max then
  why = 'failed ' .. attempt .. ' of ' .. max .. ' attempts'
end
local due = now + backoff
if not why and due > MAX_TIME_MS then why = 'its next due time would be after year 9999' end
-- A retry that would start after the job's expiry does not happen.
if not why and expired_at(f[8]) and due > expired_at(f[8]) then why = 'expired' end

local hist = history_with(f[5], {at = now, attempt = attempt or f[2], outcome = 'failed',
                                 detail = ARGV[4]})
-- Writes: the job's hash, the zset it goes to, then its removal from the others.
redis.call('HSET', KEYS[1], 'err', ARGV[4], 'tb', ARGV[5], 'hist', hist)
count_stat(KEYS[6], 'failed', 1, ttl)
if f[7] then release_slot(KEYS[9], f[6], f[7], id, KEYS[3], ARGV[9], now) end

if why then
  if parts then  -- the job's current spec goes where a dead job keeps it
    write_spec(KEYS[1], parts)
    redis.call('HDEL', bucket, id)
  end
  redis.call('HSET', KEYS[1], 'why', why)
  release_key(KEYS[5], f[4], id)
  redis.call('ZADD', KEYS[4], now, id)
  redis.call('ZREM', KEYS[2], id)
  redis.call('ZREM', KEYS[3], id)
  count_stat(KEYS[6], 'dead', 1, ttl)
  if why == 'expired' then count_stat(KEYS[6], 'expired', 1, ttl) end
  local excess = redis.call('ZCARD', KEYS[4]) - dead_max
  if excess > 0 then
    local popped = redis.call('ZPOPMIN', KEYS[4], math.min(excess, 10))
    for i = 1, #popped, 2 do redis.call('DEL', KEYS[7] .. popped[i]) end
  end
  return recorded and {'dead', recorded} or 'dead'
end

schedule(KEYS[3], id, due, ARGV[9])
redis.call('ZREM', KEYS[2], id)
redis.call('ZREM', KEYS[4], id)  -- reaped to dead while it ran: this outcome decides
return recorded and {'retry', recorded} or 'retry'
