-- cancel: scheduled -> gone. Only a job that is still scheduled can be cancelled.
-- KEYS[1] scheduled zset                dq:{Q}:scheduled
-- KEYS[2] dedupe hash                   dq:{Q}:keys
-- KEYS[3] job hash prefix               dq:{Q}:job:
-- KEYS[4] specs hash                    dq:{Q}:specs
-- ARGV[1] job id, or "" to look it up by ARGV[2]
-- ARGV[2] dedupe key, or ""
-- Returns {1, id} when a scheduled job was removed, {0, id or ""} otherwise.
-- #include _spec.lua
local id = ARGV[1]
if id == '' then
  id = redis.call('HGET', KEYS[2], ARGV[2])
  if not id then return {0, ''} end
end
if redis.call('ZREM', KEYS[1], id) == 0 then return {0, id} end
local job = KEYS[3] .. id
local key = redis.call('HGET', job, 'key')
local parts = split_spec(redis.call('HGET', KEYS[4], id) or '')
if parts and parts[6] ~= '' then key = parts[6] end
if key and redis.call('HGET', KEYS[2], key) == id then redis.call('HDEL', KEYS[2], key) end
redis.call('HDEL', KEYS[4], id)
redis.call('DEL', job)
return {1, id}
