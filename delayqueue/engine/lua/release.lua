-- release: inflight -> scheduled without a failure of the task: the broker refused the
-- dispatch (the attempt is given back), or an operator forced the job back.
-- KEYS[1] job hash                      dq:{Q}:job:<id>
-- KEYS[2] inflight zset                 dq:{Q}:inflight
-- KEYS[3] scheduled zset                dq:{Q}:scheduled
-- KEYS[4] limit state prefix, optional  dq:{Q}:limit:  (a limited job frees its slot: _limits.lua)
-- ARGV[1] job id
-- ARGV[2] fencing token, or "" for any
-- ARGV[3] delay ms before it is due again
-- ARGV[4] 1 to give the attempt back, 0 to count it
-- ARGV[5] reason, kept in the job's history
-- ARGV[6] wake channel
-- ARGV[7] 1: only while this dispatch has not begun (a message the Celery side discarded),
--         0 or absent: whether it began or not
-- Returns 1 when released, 0 when the job was not in flight (or the token is stale, or its
-- key is not a hash: reap sends such a job to dead; or it began and ARGV[7] is 1).
-- #include _now.lua
-- #include _bounds.lua
-- #include _types.lua
-- #include _history.lua
-- #include _wake.lua
-- #include _limits.lua
local now = now_ms()
local id = ARGV[1]
local delay = number_in(ARGV[3], 0, MAX_TIME_MS)
if not delay or (ARGV[4] ~= '0' and ARGV[4] ~= '1') or now + delay > MAX_TIME_MS then
  return redis.error_reply('ERR release: ARGV[3] is a delay in ms, ARGV[4] 0 or 1')
end
local bad = wrong_type({KEYS[2], 'zset', KEYS[3], 'zset'})
if bad then return bad end
local f = hash_fields(KEYS[1], 'tok', 'att', 'hist', 'began', 'task', 'lim')
if not f or (ARGV[2] ~= '' and f[1] ~= ARGV[2]) then return 0 end
if ARGV[7] == '1' and f[4] == f[1] then return 0 end
if not redis.call('ZSCORE', KEYS[2], id) then return 0 end
-- A corrupt att is left as it is (the next claim sends the job to dead, with it to see).
local attempt = counter(f[2])
local set = {}
if attempt and ARGV[4] == '1' and attempt > 0 then
  attempt = attempt - 1
  set = {'att', attempt}
end
set[#set + 1] = 'hist'
set[#set + 1] = history_with(f[3], {at = now, attempt = attempt or f[2], outcome = 'released',
                                    detail = ARGV[5]})
redis.call('HSET', KEYS[1], unpack(set))
if f[6] then release_slot(KEYS[4], f[5], f[6], id, KEYS[3], ARGV[6], now) end
schedule(KEYS[3], id, now + delay, ARGV[6])
redis.call('ZREM', KEYS[2], id)
return 1
