-- release: inflight -> scheduled without a failure of the task: the broker refused the
-- dispatch (the attempt is given back), or an operator forced the job back.
-- KEYS[1] job hash                      dq:{Q}:job:<id>
-- KEYS[2] inflight zset                 dq:{Q}:inflight
-- KEYS[3] scheduled zset                dq:{Q}:scheduled
-- ARGV[1] job id
-- ARGV[2] fencing token, or "" for any
-- ARGV[3] delay ms before it is due again
-- ARGV[4] 1 to give the attempt back, 0 to count it
-- ARGV[5] reason, kept in the job's history
-- ARGV[6] wake channel
-- Returns 1 when released, 0 when the job was not in flight (or the token is stale).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local id = ARGV[1]
local f = redis.call('HMGET', KEYS[1], 'tok', 'att', 'hist')
if ARGV[2] ~= '' and f[1] ~= ARGV[2] then return 0 end
if redis.call('ZREM', KEYS[2], id) == 0 then return 0 end
local attempt = tonumber(f[2]) or 0
if ARGV[4] == '1' and attempt > 0 then
  attempt = attempt - 1
  redis.call('HSET', KEYS[1], 'att', attempt)
end
local ok, hist = pcall(cjson.decode, f[3] or '[]')
if not ok or type(hist) ~= 'table' then hist = {} end
hist[#hist + 1] = {at = now, attempt = attempt, outcome = 'released', detail = ARGV[5]}
while #hist > 20 do table.remove(hist, 1) end
redis.call('HSET', KEYS[1], 'hist', cjson.encode(hist))
local due = now + tonumber(ARGV[3])
redis.call('ZADD', KEYS[3], due, id)
local head = redis.call('ZRANGE', KEYS[3], 0, 0)
if head[1] == id then redis.call('PUBLISH', ARGV[6], due) end
return 1
