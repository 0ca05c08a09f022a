-- begin: inflight (dispatched) -> inflight (running). Checks the fencing token and restarts
-- the visibility deadline from the moment the task really starts.
-- KEYS[1] job hash                      dq:{Q}:job:<id>
-- KEYS[2] inflight zset                 dq:{Q}:inflight
-- ARGV[1] job id
-- ARGV[2] fencing token the dispatch carried
-- ARGV[3] visibility timeout ms for jobs that set none of their own
-- Returns {1, attempt, max attempts or ""} to run, {0} when the token is stale.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local f = redis.call('HMGET', KEYS[1], 'tok', 'att', 'max', 'vt')
if f[1] ~= ARGV[2] or not redis.call('ZSCORE', KEYS[2], ARGV[1]) then return {0} end
redis.call('ZADD', KEYS[2], 'XX', now + (tonumber(f[4]) or tonumber(ARGV[3])), ARGV[1])
redis.call('HSET', KEYS[1], 'began', ARGV[2])  -- this dispatch started (see reap.lua)
redis.call('HDEL', KEYS[1], 'rp')
return {1, tonumber(f[2]) or 0, f[3] or ''}
