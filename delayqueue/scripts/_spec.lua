-- A scheduled job that was never claimed keeps its spec packed in one field of the queue's
-- specs hash (dq:{Q}:specs, id -> spec), not in a hash of its own: a key per job costs
-- Redis ~100 bytes before it holds anything. The spec is six fields joined by "\n":
--   task, args JSON, kwargs JSON or "", max attempts or "", visibility ms or "", dedupe key
-- Compact JSON holds no raw newline and task names are checked for one, so only the key,
-- which is last, may contain "\n". claim.lua unpacks the spec into the job's hash.
local SPEC_FIELDS = {'task', 'args', 'kwargs', 'max', 'vt', 'key'}

-- The spec's six fields, or nil when it is malformed.
local function split_spec(spec)
  local parts, pos = {}, 1
  for i = 1, 5 do
    local stop = string.find(spec, '\n', pos, true)
    if not stop then return nil end
    parts[i] = string.sub(spec, pos, stop - 1)
    pos = stop + 1
  end
  parts[6] = string.sub(spec, pos)
  return parts
end

-- Moves job `id`'s packed spec (if any) from the specs hash into its job hash. Returns
-- true when it moved, false when there was none, nil when it was malformed (then kept in
-- the job hash as 'raw', for people to look at).
local function unpack_spec(specs, job, id)
  local spec = redis.call('HGET', specs, id)
  if not spec then return false end
  redis.call('HDEL', specs, id)
  local parts = split_spec(spec)
  if not parts or spec == '\n\n\n\n\n' then
    redis.call('HSET', job, 'raw', spec)
    return nil
  end
  local fields = {}
  for i, value in ipairs(parts) do
    if value ~= '' then
      fields[#fields + 1] = SPEC_FIELDS[i]
      fields[#fields + 1] = value
    end
  end
  redis.call('HSET', job, unpack(fields))
  return true
end
