-- reschedule: scheduled -> scheduled at a new due time (also "run now": delay 0).
-- KEYS[1] scheduled zset                dq:{Q}:scheduled
-- KEYS[2] dedupe hash                   dq:{Q}:keys
-- ARGV[1] job id, or "" to look it up by ARGV[2]
-- ARGV[2] dedupe key, or ""
-- ARGV[3] "delay" (ARGV[4] is ms from Redis's now) or "at" (ARGV[4] is an epoch ms)
-- ARGV[4] milliseconds
-- ARGV[5] wake channel
-- Returns {id, new due ms} or {id or "", -1} when the job is not scheduled.
-- #include _now.lua
-- #include _bounds.lua
-- #include _types.lua
-- #include _dedupe.lua
-- #include _wake.lua
local now = now_ms()
local due
if ARGV[3] == 'delay' then
  due = number_in(ARGV[4], 0, MAX_TIME_MS)
  if due then due = number_in(now + due, MIN_TIME_MS, MAX_TIME_MS) end
elseif ARGV[3] == 'at' then
  due = number_in(ARGV[4], MIN_TIME_MS, MAX_TIME_MS)
end
if not due then
  return redis.error_reply('ERR reschedule: ARGV[3] is "delay" or "at", ARGV[4] ms giving a '
                           .. 'time between years 1 and 9999')
end
local bad = wrong_type({KEYS[1], 'zset', KEYS[2], 'hash'})
if bad then return bad end
local id = job_by_key(KEYS[2], ARGV[1], ARGV[2])
if not id then return {'', -1} end
if not redis.call('ZSCORE', KEYS[1], id) then return {id, -1} end
schedule(KEYS[1], id, due, ARGV[5])  -- (it is scheduled: the ZADD moves it)
return {id, due}
