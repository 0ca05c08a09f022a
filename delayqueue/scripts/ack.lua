-- ack: inflight -> gone, after the task succeeded. A stale token acks nothing.
-- KEYS[1] job hash                      dq:{Q}:job:<id>
-- KEYS[2] inflight zset                 dq:{Q}:inflight
-- KEYS[3] scheduled zset                dq:{Q}:scheduled  (a job reaped while it ran)
-- KEYS[4] dedupe hash                   dq:{Q}:keys
-- KEYS[5] this minute's stats hash      dq:{Q}:stats:<minute>
-- KEYS[6] dead zset                     dq:{Q}:dead       (a job reaped to dead while it ran)
-- ARGV[1] job id
-- ARGV[2] fencing token
-- ARGV[3] stats ttl seconds
-- Returns 1 when acked, 0 when the token is stale or the job is gone.
local f = redis.call('HMGET', KEYS[1], 'tok', 'key')
if f[1] ~= ARGV[2] then return 0 end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[6], ARGV[1])
if f[2] and redis.call('HGET', KEYS[4], f[2]) == ARGV[1] then redis.call('HDEL', KEYS[4], f[2]) end
redis.call('DEL', KEYS[1])
redis.call('HINCRBY', KEYS[5], 'acked', 1)
redis.call('EXPIRE', KEYS[5], tonumber(ARGV[3]))
return 1
