-- reap: inflight -> scheduled (due now) or dead, for jobs whose visibility deadline passed:
-- their dispatch or their task was lost (a crashed delay worker or Celery worker).
-- KEYS[1] inflight zset                 dq:{Q}:inflight
-- KEYS[2] scheduled zset                dq:{Q}:scheduled
-- KEYS[3] dead zset                     dq:{Q}:dead
-- KEYS[4] job hash prefix               dq:{Q}:job:
-- KEYS[5] dedupe hash                   dq:{Q}:keys
-- ARGV[1] most jobs to reap
-- ARGV[2] max attempts when the job stores none
-- Returns {jobs rescheduled, jobs moved to dead}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
local back, dead = 0, 0
for _, id in ipairs(ids) do
  local job = KEYS[4] .. id
  redis.call('ZREM', KEYS[1], id)
  local f = redis.call('HMGET', job, 'att', 'max', 'key', 'hist', 'task')
  local attempt = tonumber(f[1]) or 0
  local max = tonumber(f[2]) or tonumber(ARGV[2])
  local ok, hist = pcall(cjson.decode, f[4] or '[]')
  if not ok or type(hist) ~= 'table' then hist = {} end
  hist[#hist + 1] = {at = now, attempt = attempt, outcome = 'timed out',
                     detail = 'no ack before the visibility deadline'}
  while #hist > 20 do table.remove(hist, 1) end
  if f[5] then redis.call('HSET', job, 'hist', cjson.encode(hist)) end
  if attempt >= max or not f[5] then
    local why = 'visibility timeout expired after ' .. attempt .. ' of ' .. max .. ' attempts'
    if not f[5] then why = 'job data missing or incomplete in Redis' end
    redis.call('HSET', job, 'why', why)
    if f[3] and redis.call('HGET', KEYS[5], f[3]) == id then redis.call('HDEL', KEYS[5], f[3]) end
    redis.call('ZADD', KEYS[3], now, id)
    dead = dead + 1
  else
    redis.call('ZADD', KEYS[2], now, id)
    back = back + 1
  end
end
return {back, dead}
