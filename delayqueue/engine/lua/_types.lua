-- Provides the key-type checks every script makes before its first write: key_type,
-- wrong_type, hash_fields. They only read.
-- What every script keeps (docs/design.md, "Rules every script keeps"): Redis does not roll
-- a script back, so a script checks every field it reads before its first write, and
-- orders its writes so that an error part-way cannot lose a job (a job is added to the set
-- it goes to before it is removed from the one it leaves).

-- The type of key `k` ('none' when it does not exist).
local function key_type(k)
  return redis.call('TYPE', k).ok
end

-- An error reply when one of the keys (key, type, key, type, ...) exists with another
-- type than the one the script writes to it, else nil. A script calls it before its first
-- write, so a stray key fails the call instead of aborting it half-way.
local function wrong_type(list)
  for i = 1, #list, 2 do
    local t = key_type(list[i])
    if t ~= 'none' and t ~= list[i + 1] then
      return redis.error_reply('WRONGTYPE delayqueue: ' .. list[i] .. ' is a ' .. t ..
                               ', not a ' .. list[i + 1])
    end
  end
  return nil
end

-- Fields of hash `k` (HMGET), or nil when `k` exists but is not a hash.
local function hash_fields(k, ...)
  local f = redis.pcall('HMGET', k, ...)
  if f.err then return nil end
  return f
end
