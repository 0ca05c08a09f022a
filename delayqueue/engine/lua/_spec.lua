-- Provides spec_bucket, bucket_spec, split_spec, is_spec, write_spec and spec_key: the packed
-- spec of never-claimed jobs.
-- A scheduled job that was never claimed keeps its spec packed in one field (id -> spec) of
-- a specs bucket, not in a hash of its own: a key per job costs Redis ~100 bytes before it
-- holds anything. The bucket is the hash dq:{Q}:specs:<the id's last two characters>
-- (spec_bucket): ids are ULIDs, whose last characters are random Crockford base32, so a
-- queue's specs spread evenly over 1,024 buckets, each small enough (up to 128 fields of up
-- to 64 bytes, Redis's default hash-max-listpack-*) to stay a compact listpack instead of a
-- hashtable: ~40 bytes less per job (docs/design.md). Scripts get the prefix dq:{Q}:specs:
-- through KEYS (as they get the job prefix) and append the two characters, so a bucket is
-- in the queue's slot.
-- The spec is six fields joined by "\n":
--   task, args JSON, kwargs JSON or "", max attempts or "", visibility ms or "", dedupe key
-- or seven, when the job keeps a trace context (docs/tracing.md) or its key has a "\n":
--   task, args JSON, kwargs JSON or "", max attempts or "", visibility ms or "",
--   trace context or "", dedupe key
-- Compact JSON holds no raw newline, task names are checked for one and trace contexts are
-- checked, so only the key, which is last, may contain "\n": a spec with exactly five "\n"
-- has six fields (a job without a trace context pays no byte for it). claim.lua unpacks the
-- spec into the job's hash.
-- A job that has a hash (it was claimed at least once) keeps its spec fields there, never
-- in a bucket: only a job that was never claimed has a packed spec.
-- #include _types.lua

-- The specs bucket of job `id` under prefix `prefix` (dq:{Q}:specs:). Any string found in
-- Redis names one: an id of fewer than two characters names the bucket of those it has
-- (the empty id, the bucket named by the prefix alone).
local function spec_bucket(prefix, id)
  return prefix .. string.sub(id, -2)
end

-- The packed spec of job `id` in specs bucket `bucket`, false when it holds none; nil and
-- the bucket's type when the bucket is not a hash (corrupt: it holds no spec of ours). Only
-- reads.
local function bucket_spec(bucket, id)
  local spec = redis.pcall('HGET', bucket, id)
  if type(spec) == 'table' then return nil, key_type(bucket) end
  return spec
end

local SPEC_FIELDS = {'task', 'args', 'kwargs', 'max', 'vt', 'tc', 'key'}

-- The spec's seven fields (the trace context "" in a six-field spec), or nil when it is
-- malformed.
local function split_spec(spec)
  local parts, pos = {}, 1
  for i = 1, 5 do
    local stop = string.find(spec, '\n', pos, true)
    if not stop then return nil end
    parts[i] = string.sub(spec, pos, stop - 1)
    pos = stop + 1
  end
  local stop = string.find(spec, '\n', pos, true)
  parts[6] = stop and string.sub(spec, pos, stop - 1) or ''
  parts[7] = string.sub(spec, stop and stop + 1 or pos)
  return parts
end

-- Whether split_spec would split `spec` (at least five "\n"), without splitting it. Plain
-- finds, not a pattern: see docs/design.md, "Performance notes".
local function is_spec(spec)
  local pos = 1
  for _ = 1, 5 do
    local stop = string.find(spec, '\n', pos, true)
    if not stop then return false end
    pos = stop + 1
  end
  return true
end

-- Writes a split spec into job hash `job` (which must be a hash or missing): its non-empty
-- fields are set, its empty ones deleted, so nothing of an older spec stays behind. `extra`
-- (optional: field, value, ...) is set in the same HSET; with `fresh` (the hash holds no
-- spec field) there is nothing to delete.
local function write_spec(job, parts, extra, fresh)
  local set, gone = {}, {}
  for i, value in ipairs(parts) do
    if value ~= '' then
      set[#set + 1] = SPEC_FIELDS[i]
      set[#set + 1] = value
    elseif not fresh then  -- (a fresh hash has nothing to delete: nothing is listed)
      gone[#gone + 1] = SPEC_FIELDS[i]
    end
  end
  for _, value in ipairs(extra or {}) do set[#set + 1] = value end
  if #set > 0 then redis.call('HSET', job, unpack(set)) end
  if #gone > 0 then redis.call('HDEL', job, unpack(gone)) end
end

-- The dedupe key of split spec `parts` (nil or false when there is none).
local function spec_key(parts)
  return parts and parts[7] ~= '' and parts[7]
end
