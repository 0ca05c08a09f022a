-- ack: inflight -> gone, after the task succeeded. A stale token acks nothing.
-- KEYS[1] job hash                      dq:{Q}:job:<id>
-- KEYS[2] inflight zset                 dq:{Q}:inflight
-- KEYS[3] scheduled zset                dq:{Q}:scheduled  (a job reaped while it ran)
-- KEYS[4] dedupe hash                   dq:{Q}:keys
-- KEYS[5] this minute's stats hash      dq:{Q}:stats:<minute>
-- KEYS[6] dead zset                     dq:{Q}:dead       (a job reaped to dead while it ran)
-- KEYS[7] specs bucket prefix, optional dq:{Q}:specs:     (data older than the rule that a
--         job with a hash has no packed spec may have both: the spec in its bucket, KEYS[7]
--         .. the id's last two characters, goes too, and its key)
-- KEYS[8] limit state prefix, optional  dq:{Q}:limit:  (a limited job frees its slot, and the
--         next job waiting for one is due now: _limits.lua)
-- ARGV[1] job id
-- ARGV[2] fencing token
-- ARGV[3] stats ttl seconds
-- ARGV[4] wake channel (a waiter made due now wakes the delay workers; with KEYS[9], given)
-- Carried, optional, after all of the above (a Django task's job: its attempt's outcome is
-- written first, as task_finished.lua writes it, whatever the ack then finds: one call where
-- there were two; engine/carried.settling_with):
--   KEYS[9] the job's results hash      dq:{Q}:result:<id>
--   ARGV[5] task_finished.lua's ARGV[1] (ttl s of the results hash), ARGV[6...] its
--           ARGV[2...] (field, value pairs)
-- Returns 1 when acked, 0 when the token is stale or the job is gone; with KEYS[9], {that,
-- task_finished.lua's reply (1) or the text of the error it met}.
-- #include _bounds.lua
-- #include _types.lua
-- #include _spec.lua
-- #include _dedupe.lua
-- #include _stats.lua

-- Frees the slot job `id` holds of its task's limit (field 'lim'). Its helpers are defined
-- in here, so only a limited job pays for them (Redis runs every definition of a script at
-- each call).
local function free_slot(task, lim, id)
-- #include _now.lua
-- #include _limits.lua
  release_slot(KEYS[8], task, lim, id, KEYS[3], ARGV[4], now_ms())
end

local ttl = number_in(ARGV[3], 1, 1e9)
if not ttl then return redis.error_reply('ERR ack: ARGV[3] is a stats ttl in seconds') end
local recorded  -- (nil: no results hash given)
if KEYS[9] then
  -- A Django task's outcome (only such a job pays for its helper's definition)
-- #include _task_finish.lua
  recorded = outcome_written(KEYS[9], 5)
end
local bad = wrong_type({KEYS[2], 'zset', KEYS[3], 'zset', KEYS[4], 'hash', KEYS[6], 'zset'})
if bad then return bad end
-- A job key that is not a hash holds no token: nothing to ack (reap sends it to dead).
local f = hash_fields(KEYS[1], 'tok', 'key', 'task', 'lim')
if not f or f[1] ~= ARGV[2] then return recorded and {0, recorded} or 0 end
local id = ARGV[1]
release_key(KEYS[4], f[2], id)
-- (A bucket that is not a hash holds no spec: the job is acked all the same.)
local bucket = KEYS[7] and spec_bucket(KEYS[7], id)
local spec = bucket and bucket_spec(bucket, id)
if spec then
  release_key(KEYS[4], spec_key(split_spec(spec)), id)
  redis.call('HDEL', bucket, id)
end
if f[4] then free_slot(f[3], f[4], id) end
redis.call('ZREM', KEYS[2], id)
redis.call('ZREM', KEYS[3], id)
redis.call('ZREM', KEYS[6], id)
redis.call('DEL', KEYS[1])
count_stat(KEYS[5], 'acked', 1, ttl)
return recorded and {1, recorded} or 1
