-- begin: inflight (dispatched) -> inflight (running). Checks the fencing token and restarts
-- the visibility deadline from the moment the task really starts.
-- KEYS[1] job hash                      dq:{Q}:job:<id>
-- KEYS[2] inflight zset                 dq:{Q}:inflight
-- KEYS[3] limit state prefix, optional  dq:{Q}:limit:  (a job holding a slot keeps it until
--         its new deadline: _limits.lua)
-- ARGV[1] job id
-- ARGV[2] fencing token the dispatch carried
-- ARGV[3] visibility timeout ms for jobs that set none of their own
-- Returns {1, attempt, max attempts or "", now in microseconds} to run (Redis's clock: a job
-- dispatched ahead of its due time is held until then by it, see attempt.hold_until_due), {0}
-- when the token is stale (or the job's data is corrupt: it does not run, and reap or the
-- next claim sends it to dead), {2} when the job expired before it could start (it does not
-- run; the caller buries it as "expired").
-- #include _now.lua
-- #include _bounds.lua
-- #include _types.lua
-- #include _limits.lua
local now_in_us = now_us()
local now = math.floor(now_in_us / 1000)
local default_vt = number_in(ARGV[3], 0, MAX_VT_MS)
if not default_vt then
  return redis.error_reply('ERR begin: ARGV[3] is a visibility timeout in ms')
end
local bad = wrong_type({KEYS[2], 'zset'})
if bad then return bad end
local f = hash_fields(KEYS[1], 'tok', 'att', 'max', 'vt', 'task', 'lim', 'exp')
if not f or f[1] ~= ARGV[2] or not redis.call('ZSCORE', KEYS[2], ARGV[1]) then return {0} end
local vt = default_vt
if f[4] then vt = number_in(f[4], 1, MAX_VT_MS) end
local attempt = counter(f[2])
if not (vt and attempt and max_attempts(f[3], 1)) then return {0} end
if expired_at(f[7]) and now > expired_at(f[7]) then return {2} end
local l = KEYS[3] and f[5] and parse_limits(f[6])
if l and l.conc > 0 then
  local running = limit_base(KEYS[3], f[5], l) .. ':c'
  if redis.call('ZADD', running, 'XX', 'CH', now + vt, ARGV[1]) == 1 then
    keep_for(running, vt + 1000)
  end
end
redis.call('ZADD', KEYS[2], 'XX', now + vt, ARGV[1])
redis.call('HSET', KEYS[1], 'began', ARGV[2])  -- this dispatch started (see reap.lua)
redis.call('HDEL', KEYS[1], 'rp')
return {1, attempt, f[3] or '', now_in_us}
