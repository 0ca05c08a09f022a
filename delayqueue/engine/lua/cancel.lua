-- cancel: scheduled -> gone. Only a job that is still scheduled can be cancelled.
-- KEYS[1] scheduled zset                dq:{Q}:scheduled
-- KEYS[2] dedupe hash                   dq:{Q}:keys
-- KEYS[3] job hash prefix               dq:{Q}:job:
-- KEYS[4] specs bucket prefix           dq:{Q}:specs: (a never-claimed job's packed spec is
--         in the hash KEYS[4] .. the id's last two characters, see _spec.lua)
-- ARGV[1] job id, or "" to look it up by ARGV[2]
-- ARGV[2] dedupe key, or ""
-- Returns {1, id} when a scheduled job was removed, {0, id or ""} otherwise.
-- #include _types.lua
-- #include _spec.lua
-- #include _dedupe.lua
local bad = wrong_type({KEYS[1], 'zset', KEYS[2], 'hash'})
if bad then return bad end
local id = job_by_key(KEYS[2], ARGV[1], ARGV[2])
if not id then return {0, ''} end
if not redis.call('ZSCORE', KEYS[1], id) then return {0, id} end
local job = KEYS[3] .. id
local bucket = spec_bucket(KEYS[4], id)
-- The job's keys: its hash's (a job key that is not a hash has none to read), its packed
-- spec's (the current spec) when it has one (a bucket that is not a hash holds none), and
-- the key it was looked up by.
local f = hash_fields(job, 'key')
local spec = bucket_spec(bucket, id)
release_key(KEYS[2], f and f[1], id)
release_key(KEYS[2], spec_key(split_spec(spec or '')), id)
if ARGV[2] ~= '' then release_key(KEYS[2], ARGV[2], id) end
if spec then redis.call('HDEL', bucket, id) end
redis.call('DEL', job)
redis.call('ZREM', KEYS[1], id)
return {1, id}
