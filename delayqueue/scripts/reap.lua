-- reap: inflight -> scheduled (due now) or dead, for jobs whose visibility deadline passed.
-- A task that started and did not finish (a Celery worker died) used an attempt: at
-- max attempts the job goes to dead. A dispatch that never started (lost by a crashed delay
-- worker, or still queued behind a Celery backlog) is not an attempt: the job goes back, and
-- its next dispatch gets twice the time (claim.lua reads 'rp').
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
  local f = redis.call('HMGET', job, 'att', 'max', 'key', 'hist', 'task', 'tok', 'began', 'rp')
  local attempt = tonumber(f[1]) or 0
  local max = tonumber(f[2]) or tonumber(ARGV[2])
  local ok, hist = pcall(cjson.decode, f[4] or '[]')
  if not ok or type(hist) ~= 'table' then hist = {} end
  local started = f[7] ~= false and f[7] == f[6]
  if f[5] and not started then
    if attempt > 0 then attempt = attempt - 1 end
    redis.call('HSET', job, 'att', attempt)
    redis.call('HSET', job, 'rp', (tonumber(f[8]) or 0) + 1)
    hist[#hist + 1] = {at = now, attempt = attempt + 1, outcome = 'not started',
                       detail = 'dispatched but not started before the visibility deadline'}
  else
    hist[#hist + 1] = {at = now, attempt = attempt, outcome = 'timed out',
                       detail = 'started but no ack before the visibility deadline'}
  end
  while #hist > 20 do table.remove(hist, 1) end
  if f[5] then redis.call('HSET', job, 'hist', cjson.encode(hist)) end
  if not f[5] or (started and attempt >= max) then
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
