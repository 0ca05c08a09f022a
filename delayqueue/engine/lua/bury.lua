-- bury: scheduled or inflight -> dead with a reason, for a job that can never run
-- (unknown task, corrupt payload).
-- KEYS[1] job hash                      dq:{Q}:job:<id>
-- KEYS[2] inflight zset                 dq:{Q}:inflight
-- KEYS[3] scheduled zset                dq:{Q}:scheduled
-- KEYS[4] dead zset                     dq:{Q}:dead
-- KEYS[5] dedupe hash                   dq:{Q}:keys
-- KEYS[6] this minute's stats hash      dq:{Q}:stats:<minute>
-- KEYS[7] specs bucket prefix           dq:{Q}:specs: (a scheduled job's spec moves from its
--         bucket, KEYS[7] .. the id's last two characters, into its hash, to be seen in dead)
-- KEYS[8] limit state prefix, optional  dq:{Q}:limit:  (a limited job frees its slot: _limits.lua)
-- KEYS[9] tasks hash, optional           dq:{Q}:tasks  (a coded spec's code -> its task, max
--         attempts and visibility, which the job's hash gets: _spec.lua; a spec whose code
--         it lacks is kept as raw)
-- ARGV[1] job id
-- ARGV[2] reason
-- ARGV[3] stats ttl seconds
-- ARGV[4] wake channel, optional (the waiter a freed slot makes due)
-- Returns 1 when the job moved to dead, 0 when it was neither scheduled nor in flight.
-- #include _now.lua
-- #include _bounds.lua
-- #include _types.lua
-- #include _foreign.lua
-- #include _spec.lua
-- #include _dedupe.lua
-- #include _stats.lua
-- #include _limits.lua
local now = now_ms()
local id = ARGV[1]
local ttl = number_in(ARGV[3], 1, 1e9)
if not ttl then return redis.error_reply('ERR bury: ARGV[3] is a stats ttl in seconds') end
local bad = wrong_type({KEYS[2], 'zset', KEYS[3], 'zset', KEYS[4], 'zset', KEYS[5], 'hash'})
if bad then return bad end
if not (redis.call('ZSCORE', KEYS[2], id) or redis.call('ZSCORE', KEYS[3], id)) then
  return 0
end
local f = hash_fields(KEYS[1], 'key', 'task', 'lim')
-- (A bucket that is not a hash holds no spec: the job goes to dead without one.)
local bucket = spec_bucket(KEYS[7], id)
local spec = bucket_spec(bucket, id)
local parts = spec and split_spec(spec)
if spec == '\n\n\n\n\n' then parts = nil end
local key = spec_key(parts)
if parts and not task_path(KEYS[9], parts, {}) then parts = nil end  -- (kept as raw)

-- Writes: the job's hash, then dead, then its removal from where it was.
if not f then replace_foreign(KEYS[1], ARGV[2]) end
if parts then
  write_spec(KEYS[1], parts)
elseif spec then  -- kept for people to look at
  redis.call('HSET', KEYS[1], f and 'raw' or 'raw_spec', spec)
end
if spec then redis.call('HDEL', bucket, id) end
redis.call('HSET', KEYS[1], 'why', ARGV[2], 'err', ARGV[2])
-- The job's keys: its hash's, and its packed spec's (the current spec) when it has one.
release_key(KEYS[5], f and f[1], id)
release_key(KEYS[5], key, id)
if f and f[3] then release_slot(KEYS[8], f[2], f[3], id, KEYS[3], ARGV[4], now) end
redis.call('ZADD', KEYS[4], now, id)
redis.call('ZREM', KEYS[2], id)
redis.call('ZREM', KEYS[3], id)
count_stat(KEYS[6], 'dead', 1, ttl)
return 1
