-- Provides replace_foreign(): what becomes of a job key that holds something else than a
-- hash once the script sends that job to dead.
-- #include _types.lua

-- Turns a job key that is not a hash (someone else's data) into a hash saying why, keeping
-- a string's value as 'raw'. Writes: call it only once the script decided to bury the job.
local function replace_foreign(job, why)
  local t = key_type(job)
  local raw = '(a Redis ' .. t .. ')'
  if t == 'string' then raw = redis.call('GET', job) end
  redis.call('DEL', job)
  redis.call('HSET', job, 'why', why, 'err', why, 'raw', raw)
end
