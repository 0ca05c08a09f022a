-- claim: scheduled -> inflight for a batch of due jobs, each with a fresh fencing token.
-- KEYS[1] scheduled zset                dq:{Q}:scheduled
-- KEYS[2] inflight zset                 dq:{Q}:inflight
-- KEYS[3] job hash prefix               dq:{Q}:job:
-- KEYS[4] paused flag                   dq:{Q}:paused
-- KEYS[5] this minute's stats hash      dq:{Q}:stats:<minute>
-- KEYS[6] dead zset                     dq:{Q}:dead
-- KEYS[7] specs hash                    dq:{Q}:specs  (a never-claimed job's spec moves
--                                                      into its hash here)
-- ARGV[1] most jobs to claim
-- ARGV[2] visibility timeout ms for jobs that set none of their own (doubled per earlier
--         dispatch that never started, up to 32 times)
-- ARGV[3] stats ttl seconds
-- Returns {now ms, next due ms or -1, next deadline ms or -1, paused 0|1,
--          {{id, token, attempt, task, args json, kwargs json or ""}, ...}}
-- #include _spec.lua
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function head_score(zset)
  local head = redis.call('ZRANGE', zset, 0, 0, 'WITHSCORES')
  if head[2] then return tonumber(head[2]) end
  return -1
end

if redis.call('EXISTS', KEYS[4]) == 1 then
  return {now, -1, head_score(KEYS[2]), 1, {}}
end

local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
local claimed, deadlines = {}, {}
-- A counter HINCRBY refuses would abort the script at this job on every pass, and so stop
-- the whole queue: such a job goes to dead instead.
local function counter_ok(value)
  return not value or (#value < 16 and string.match(value, '^%-?%d+$') ~= nil)
end

for _, id in ipairs(ids) do
  local job = KEYS[3] .. id
  local unpacked = unpack_spec(KEYS[7], job, id)
  local f = redis.call('HMGET', job, 'task', 'args', 'kwargs', 'vt', 'tok', 'att', 'rp')
  if unpacked == nil then
    redis.call('HSET', job, 'why', 'corrupt job data: its packed spec has fewer than 6 fields')
    redis.call('ZADD', KEYS[6], now, id)
  elseif f[1] and f[2] and not (counter_ok(f[5]) and counter_ok(f[6])) then
    redis.call('HSET', job, 'why', 'corrupt job data: tok or att is not an integer')
    redis.call('ZADD', KEYS[6], now, id)
  elseif f[1] and f[2] then
    local token = redis.call('HINCRBY', job, 'tok', 1)
    local attempt = redis.call('HINCRBY', job, 'att', 1)
    -- Each earlier dispatch that timed out before its task even started (lost, or stuck
    -- behind a Celery backlog) doubles the time this one gets: no re-dispatch storm.
    local redispatched = math.min(tonumber(f[7]) or 0, 5)
    local deadline = now + (tonumber(f[4]) or tonumber(ARGV[2])) * 2 ^ redispatched
    deadlines[#deadlines + 1] = deadline
    deadlines[#deadlines + 1] = id
    claimed[#claimed + 1] = {id, token, attempt, f[1], f[2], f[3] or ''}
  else
    -- Not a job delayqueue wrote (hash missing or incomplete): keep it where people look.
    redis.call('HSET', job, 'why', 'job data missing or incomplete in Redis')
    redis.call('ZADD', KEYS[6], now, id)
  end
end
if #ids > 0 then
  redis.call('ZREM', KEYS[1], unpack(ids))
end
if #deadlines > 0 then
  redis.call('ZADD', KEYS[2], unpack(deadlines))
  redis.call('HINCRBY', KEYS[5], 'dispatched', #claimed)
  redis.call('EXPIRE', KEYS[5], tonumber(ARGV[3]))
end
return {now, head_score(KEYS[1]), head_score(KEYS[2]), 0, claimed}
