-- reschedule: scheduled -> scheduled at a new due time (also "run now": delay 0).
-- KEYS[1] scheduled zset                dq:{Q}:scheduled
-- KEYS[2] dedupe hash                   dq:{Q}:keys
-- ARGV[1] job id, or "" to look it up by ARGV[2]
-- ARGV[2] dedupe key, or ""
-- ARGV[3] "delay" (ARGV[4] is ms from Redis's now) or "at" (ARGV[4] is an epoch ms)
-- ARGV[4] milliseconds
-- ARGV[5] wake channel
-- Returns {id, new due ms} or {id or "", -1} when the job is not scheduled.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local id = ARGV[1]
if id == '' then
  id = redis.call('HGET', KEYS[2], ARGV[2])
  if not id then return {'', -1} end
end
if not redis.call('ZSCORE', KEYS[1], id) then return {id, -1} end
local due = tonumber(ARGV[4])
if ARGV[3] == 'delay' then due = now + due end
redis.call('ZADD', KEYS[1], 'XX', due, id)
local head = redis.call('ZRANGE', KEYS[1], 0, 0)
if head[1] == id then redis.call('PUBLISH', ARGV[5], due) end
return {id, due}
