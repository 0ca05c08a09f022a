-- Provides the dedupe hash (dq:{Q}:keys, dedupe key -> job id) look-up and release:
-- job_by_key, release_key.

-- Job id `id`, or when it is "" the job dedupe key `key` points at (false when none).
local function job_by_key(dedupe, id, key)
  if id ~= '' then return id end
  return redis.call('HGET', dedupe, key)
end

-- Deletes dedupe key `key` (nil or false: nothing to do) when it still points at job `id`:
-- a key that a newer job took since stays with that job.
local function release_key(dedupe, key, id)
  if key and redis.call('HGET', dedupe, key) == id then redis.call('HDEL', dedupe, key) end
end
