-- bury: scheduled or inflight -> dead with a reason, for a job that can never run
-- (unknown task, corrupt payload).
-- KEYS[1] job hash                      dq:{Q}:job:<id>
-- KEYS[2] inflight zset                 dq:{Q}:inflight
-- KEYS[3] scheduled zset                dq:{Q}:scheduled
-- KEYS[4] dead zset                     dq:{Q}:dead
-- KEYS[5] dedupe hash                   dq:{Q}:keys
-- KEYS[6] this minute's stats hash      dq:{Q}:stats:<minute>
-- KEYS[7] specs hash                    dq:{Q}:specs  (a scheduled job's spec moves into
--                                                      its hash, to be seen in dead)
-- ARGV[1] job id
-- ARGV[2] reason
-- ARGV[3] stats ttl seconds
-- Returns 1 when the job moved to dead, 0 when it was neither scheduled nor in flight.
-- #include _spec.lua
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local id = ARGV[1]
local moved = redis.call('ZREM', KEYS[2], id) + redis.call('ZREM', KEYS[3], id)
if moved == 0 then return 0 end
unpack_spec(KEYS[7], KEYS[1], id)
local key = redis.call('HGET', KEYS[1], 'key')
if key and redis.call('HGET', KEYS[5], key) == id then redis.call('HDEL', KEYS[5], key) end
redis.call('HSET', KEYS[1], 'why', ARGV[2], 'err', ARGV[2])
redis.call('ZADD', KEYS[4], now, id)
redis.call('HINCRBY', KEYS[6], 'dead', 1)
redis.call('EXPIRE', KEYS[6], tonumber(ARGV[3]))
return 1
