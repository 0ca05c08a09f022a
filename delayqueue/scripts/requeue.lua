-- requeue: dead -> scheduled with a fresh count of attempts ("retry" in the admin).
-- KEYS[1] job hash                      dq:{Q}:job:<id>
-- KEYS[2] dead zset                     dq:{Q}:dead
-- KEYS[3] scheduled zset                dq:{Q}:scheduled
-- KEYS[4] dedupe hash                   dq:{Q}:keys
-- ARGV[1] job id
-- ARGV[2] delay ms before it is due
-- ARGV[3] wake channel
-- Returns 1 when requeued, 0 when the job is not dead, -1 when its data cannot run.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local id = ARGV[1]
if not redis.call('ZSCORE', KEYS[2], id) then return 0 end
local f = redis.call('HMGET', KEYS[1], 'task', 'args', 'key')
if not (f[1] and f[2]) then return -1 end
redis.call('ZREM', KEYS[2], id)
redis.call('HSET', KEYS[1], 'att', 0)
redis.call('HDEL', KEYS[1], 'why')
if f[3] then redis.call('HSETNX', KEYS[4], f[3], id) end
local due = now + tonumber(ARGV[2])
redis.call('ZADD', KEYS[3], due, id)
local head = redis.call('ZRANGE', KEYS[3], 0, 0)
if head[1] == id then redis.call('PUBLISH', ARGV[3], due) end
return 1
