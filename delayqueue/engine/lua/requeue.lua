-- requeue: dead -> scheduled with a fresh count of attempts and of dispatches that never
-- started ("retry" in the admin), and no expiry (an operator who retries an expired job wants
-- it run; its rate and concurrency still apply).
-- KEYS[1] job hash                      dq:{Q}:job:<id>
-- KEYS[2] dead zset                     dq:{Q}:dead
-- KEYS[3] scheduled zset                dq:{Q}:scheduled
-- KEYS[4] dedupe hash                   dq:{Q}:keys
-- ARGV[1] job id
-- ARGV[2] delay ms before it is due
-- ARGV[3] wake channel
-- Returns 1 when requeued, 0 when the job is not dead, -1 when its data cannot run.
-- #include _now.lua
-- #include _bounds.lua
-- #include _types.lua
-- #include _wake.lua
local now = now_ms()
local id = ARGV[1]
local delay = number_in(ARGV[2], 0, MAX_TIME_MS)
if not delay or now + delay > MAX_TIME_MS then
  return redis.error_reply('ERR requeue: ARGV[2] is a delay in ms')
end
local bad = wrong_type({KEYS[2], 'zset', KEYS[3], 'zset', KEYS[4], 'hash'})
if bad then return bad end
if not redis.call('ZSCORE', KEYS[2], id) then return 0 end
local f = hash_fields(KEYS[1], 'task', 'args', 'key')
if not (f and f[1] and f[2]) then return -1 end
-- Writes: the job's hash, then scheduled, then its removal from dead.
redis.call('HSET', KEYS[1], 'att', 0)
redis.call('HDEL', KEYS[1], 'why', 'rp', 'exp')
if f[3] then redis.call('HSETNX', KEYS[4], f[3], id) end
schedule(KEYS[3], id, now + delay, ARGV[3])
redis.call('ZREM', KEYS[2], id)
return 1
