-- cancel: scheduled -> gone. Only a job that is still scheduled can be cancelled.
-- KEYS[1] scheduled zset                dq:{Q}:scheduled
-- KEYS[2] dedupe hash                   dq:{Q}:keys
-- KEYS[3] job hash prefix               dq:{Q}:job:
-- KEYS[4] specs hash                    dq:{Q}:specs
-- ARGV[1] job id, or "" to look it up by ARGV[2]
-- ARGV[2] dedupe key, or ""
-- Returns {1, id} when a scheduled job was removed, {0, id or ""} otherwise.
-- #include _guard.lua
-- #include _spec.lua
local bad = wrong_type({KEYS[1], 'zset', KEYS[2], 'hash', KEYS[4], 'hash'})
if bad then return bad end
local id = ARGV[1]
if id == '' then
  id = redis.call('HGET', KEYS[2], ARGV[2])
  if not id then return {0, ''} end
end
if not redis.call('ZSCORE', KEYS[1], id) then return {0, id} end
local job = KEYS[3] .. id
-- The job's key: its packed spec's when it has one (the current spec), else its hash's
-- (a job key that is not a hash has none to read).
local keys = {}
local f = hash_fields(job, 'key')
if f and f[1] then keys[#keys + 1] = f[1] end
local parts = split_spec(redis.call('HGET', KEYS[4], id) or '')
if parts and parts[6] ~= '' then keys[#keys + 1] = parts[6] end
for _, key in ipairs(keys) do
  if redis.call('HGET', KEYS[2], key) == id then redis.call('HDEL', KEYS[2], key) end
end
redis.call('HDEL', KEYS[4], id)
redis.call('DEL', job)
redis.call('ZREM', KEYS[1], id)
return {1, id}
