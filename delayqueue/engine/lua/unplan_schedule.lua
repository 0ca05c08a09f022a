-- unplan_schedule: planned -> paused, or planned | paused -> gone. The job of the next
-- occurrence is removed when it was never claimed; a paused schedule keeps its record (and
-- its place in the schedules zset, at +inf, so it is listed) until it is planned again; a
-- removed one loses both.
-- KEYS[1] schedules zset                dq:{Q}:schedules
-- KEYS[2] the schedule's hash           dq:{Q}:schedule:<name>
-- KEYS[3] scheduled zset                dq:{Q}:scheduled
-- KEYS[4] specs bucket prefix           dq:{Q}:specs:
-- KEYS[5] job hash prefix               dq:{Q}:job:
-- ARGV[1] the schedule's name
-- ARGV[2] "pause" | "remove"
-- Returns 1 when the schedule was planned (or, for "remove", existed), 0 otherwise.
-- #include _types.lua
-- #include _occurrence.lua
local bad = wrong_type({KEYS[1], 'zset', KEYS[2], 'hash', KEYS[3], 'zset'})
if bad then return bad end
local f = redis.call('HMGET', KEYS[2], 'job', 'paused')
local existed = redis.call('EXISTS', KEYS[2]) == 1
drop_occurrence(KEYS[3], KEYS[4], KEYS[5], f[1])
if ARGV[2] == 'remove' then
  redis.call('DEL', KEYS[2])
  redis.call('ZREM', KEYS[1], ARGV[1])
  return existed and 1 or 0
end
if not existed or f[2] then return 0 end
redis.call('HSET', KEYS[2], 'paused', '1')
redis.call('HDEL', KEYS[2], 'job')
redis.call('ZADD', KEYS[1], '+inf', ARGV[1])
return 1
