-- fail: inflight -> scheduled (after a backoff) or dead (attempts used up), after the task
-- raised. A stale token changes nothing.
-- KEYS[1] job hash                      dq:{Q}:job:<id>
-- KEYS[2] inflight zset                 dq:{Q}:inflight
-- KEYS[3] scheduled zset                dq:{Q}:scheduled
-- KEYS[4] dead zset                     dq:{Q}:dead
-- KEYS[5] dedupe hash                   dq:{Q}:keys
-- KEYS[6] this minute's stats hash      dq:{Q}:stats:<minute>
-- KEYS[7] job hash prefix               dq:{Q}:job:   (to trim the oldest dead jobs)
-- ARGV[1] job id
-- ARGV[2] fencing token
-- ARGV[3] backoff ms before the next attempt
-- ARGV[4] error ("ExcType: message")
-- ARGV[5] traceback
-- ARGV[6] max attempts when the job stores none
-- ARGV[7] most dead jobs kept
-- ARGV[8] stats ttl seconds
-- ARGV[9] wake channel
-- Returns "retry", "dead" or "stale".
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local id = ARGV[1]
local f = redis.call('HMGET', KEYS[1], 'tok', 'att', 'max', 'key', 'hist')
if f[1] ~= ARGV[2] then return 'stale' end
local attempt = tonumber(f[2]) or 0
local max = tonumber(f[3]) or tonumber(ARGV[6])

local ok, hist = pcall(cjson.decode, f[5] or '[]')
if not ok or type(hist) ~= 'table' then hist = {} end
hist[#hist + 1] = {at = now, attempt = attempt, outcome = 'failed', detail = ARGV[4]}
while #hist > 20 do table.remove(hist, 1) end
redis.call('HSET', KEYS[1], 'err', ARGV[4], 'tb', ARGV[5], 'hist', cjson.encode(hist))
redis.call('ZREM', KEYS[2], id)
redis.call('ZREM', KEYS[4], id)  -- reaped to dead while it ran: this outcome decides
redis.call('HINCRBY', KEYS[6], 'failed', 1)
redis.call('EXPIRE', KEYS[6], tonumber(ARGV[8]))

if attempt >= max then
  redis.call('ZREM', KEYS[3], id)
  redis.call('HSET', KEYS[1], 'why', 'failed ' .. attempt .. ' of ' .. max .. ' attempts')
  if f[4] and redis.call('HGET', KEYS[5], f[4]) == id then redis.call('HDEL', KEYS[5], f[4]) end
  redis.call('ZADD', KEYS[4], now, id)
  redis.call('HINCRBY', KEYS[6], 'dead', 1)
  local excess = redis.call('ZCARD', KEYS[4]) - tonumber(ARGV[7])
  if excess > 0 then
    local popped = redis.call('ZPOPMIN', KEYS[4], math.min(excess, 10))
    for i = 1, #popped, 2 do redis.call('DEL', KEYS[7] .. popped[i]) end
  end
  return 'dead'
end

local due = now + tonumber(ARGV[3])
redis.call('ZADD', KEYS[3], due, id)
local head = redis.call('ZRANGE', KEYS[3], 0, 0)
if head[1] == id then redis.call('PUBLISH', ARGV[9], due) end
return 'retry'
