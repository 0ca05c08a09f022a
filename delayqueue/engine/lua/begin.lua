-- begin: inflight (dispatched) -> inflight (running). Checks the fencing token and restarts
-- the visibility deadline from the moment the task really starts.
-- KEYS[1] job hash                      dq:{Q}:job:<id>
-- KEYS[2] inflight zset                 dq:{Q}:inflight
-- ARGV[1] job id
-- ARGV[2] fencing token the dispatch carried
-- ARGV[3] visibility timeout ms for jobs that set none of their own
-- Returns {1, attempt, max attempts or "", now in microseconds} to run (Redis's clock: a job
-- dispatched ahead of its due time is held until then by it, see attempt.hold_until_due), {0}
-- when the token is stale (or the job's data is corrupt: it does not run, and reap or the
-- next claim sends it to dead).
-- #include _now.lua
-- #include _bounds.lua
-- #include _types.lua
local now_in_us = now_us()
local now = math.floor(now_in_us / 1000)
local default_vt = number_in(ARGV[3], 0, MAX_VT_MS)
if not default_vt then
  return redis.error_reply('ERR begin: ARGV[3] is a visibility timeout in ms')
end
local bad = wrong_type({KEYS[2], 'zset'})
if bad then return bad end
local f = hash_fields(KEYS[1], 'tok', 'att', 'max', 'vt')
if not f or f[1] ~= ARGV[2] or not redis.call('ZSCORE', KEYS[2], ARGV[1]) then return {0} end
local vt = default_vt
if f[4] then vt = number_in(f[4], 1, MAX_VT_MS) end
local attempt = counter(f[2])
if not (vt and attempt and max_attempts(f[3], 1)) then return {0} end
redis.call('ZADD', KEYS[2], 'XX', now + vt, ARGV[1])
redis.call('HSET', KEYS[1], 'began', ARGV[2])  -- this dispatch started (see reap.lua)
redis.call('HDEL', KEYS[1], 'rp')
return {1, attempt, f[3] or '', now_in_us}
