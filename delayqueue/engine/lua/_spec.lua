-- Provides spec_bucket, bucket_spec, split_spec, join_spec, is_spec, write_spec, spec_key,
-- code_spec and task_path: the packed spec of never-claimed jobs.
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
-- In its bucket a spec may be coded (docs/design.md, "Bytes per job"): "\1" and a code of
-- [0-9A-Za-z], which names the task, max attempts and visibility ms of the spec in the
-- queue's tasks hash dq:{Q}:tasks ("<task>\n<max>\n<vt>", the task's options as the
-- producer packs them), then the args (a JSON list: "[" first), then "\n" kwargs, "\n"
-- trace context and "\n" key, the empty ones at the end left out. enqueue.lua writes
-- "\1" "3" '[42]' for "app.tasks.remind\n[42]\n\n5\n\n" (code_spec: 7 bytes for 26);
-- the scripts that move a bucket spec into a job hash put the options back (task_path): a
-- job hash always holds the path. The tasks hash maps each code to its options and back
-- (the last number given, in the field "\1"); it only grows, and a code once given names
-- its options for good. No task path starts with "\1" (is_spec refuses such a spec), so a
-- spec without a code, as earlier versions wrote them, reads as before; a version before
-- this one cannot read a coded spec (its delay workers are upgraded first).
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
-- malformed. A coded spec's fields are its code, args, kwargs, "", "", trace context and
-- key, with `coded` set: task_path fills in the task, max and vt.
local function split_spec(spec)
  if string.byte(spec, 1) == 1 then
    local at = string.find(spec, '[', 2, true)
    if not at or string.find(string.sub(spec, 2, at - 1), '[^%w]') then return nil end
    local parts, pos = {string.sub(spec, 1, at - 1), '', '', '', '', '', '', coded = true}, at
    for _, i in ipairs({2, 3, 6}) do
      local stop = string.find(spec, '\n', pos, true)
      if not stop then
        parts[i] = string.sub(spec, pos)
        return parts
      end
      parts[i] = string.sub(spec, pos, stop - 1)
      pos = stop + 1
    end
    parts[7] = string.sub(spec, pos)
    return parts
  end
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

-- Split spec `parts` as one string again: coded as it was read (split_spec), or in full.
local function join_spec(parts)
  if not parts.coded then return table.concat(parts, '\n') end
  local tail = {parts[3], parts[6], parts[7]}
  while #tail > 0 and tail[#tail] == '' do tail[#tail] = nil end
  if #tail == 0 then return parts[1] .. parts[2] end
  return parts[1] .. parts[2] .. '\n' .. table.concat(tail, '\n')
end

-- Whether split_spec would split `spec` (at least five "\n"), without splitting it, and
-- its task part is no code ("\1" first: see above). Plain finds, not a pattern: see
-- docs/design.md, "Performance notes".
local function is_spec(spec)
  if string.byte(spec, 1) == 1 then return false end
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

-- Task options "<task>\n<max>\n<vt>" as {task, max, vt}, or nil when malformed.
local function split_options(options)
  local one = string.find(options, '\n', 1, true)
  local two = one and string.find(options, '\n', one + 1, true)
  if not two or one == 1 or string.find(options, '\n', two + 1, true) then return nil end
  return {string.sub(options, 1, one - 1), string.sub(options, one + 1, two - 1),
          string.sub(options, two + 1)}
end

-- `spec` (checked by is_spec) coded with tasks hash `tasks` (see above), its options' code
-- made on their first use (the next number of field "\1", in base 62 after "\1"); `spec` as
-- it is when `tasks` is nil or not a hash, or its args do not start with "[" (nothing
-- written: the path stays readable). `codes` (options -> code or false) is the caller's
-- cache for one call: one HGET per task.
local function code_spec(tasks, spec, codes)
  if not tasks then return spec end
  local t = string.find(spec, '\n', 1, true)  -- the ends of the task, args, kwargs, max, vt
  local a = string.find(spec, '\n', t + 1, true)
  local k = string.find(spec, '\n', a + 1, true)
  local m = string.find(spec, '\n', k + 1, true)
  local v = string.find(spec, '\n', m + 1, true)
  if t == 1 or string.byte(spec, t + 1) ~= 91 then return spec end
  local options = string.sub(spec, 1, t) .. string.sub(spec, k + 1, v - 1)
  local code = codes[options]
  if code == nil then
    code = redis.pcall('HGET', tasks, options)
    if code == false then
      local n = redis.pcall('HINCRBY', tasks, '\1', 1)
      if type(n) == 'number' then
        local digits = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz'
        code = ''
        repeat
          code = string.sub(digits, n % 62 + 1, n % 62 + 1) .. code
          n = math.floor(n / 62)
        until n == 0
        code = '\1' .. code
        redis.call('HSET', tasks, options, code, code, options)
      end
    end
    if type(code) ~= 'string' then code = false end
    codes[options] = code
  end
  if not code then return spec end
  if v == #spec and k == a + 1 then  -- no kwargs, trace context or key: the usual job
    return code .. string.sub(spec, t + 1, a - 1)
  end
  local parts = split_spec(spec)
  parts[1], parts.coded = code, true
  return join_spec(parts)
end

-- Puts the task, max attempts and visibility ms of coded split spec `parts` in place, from
-- tasks hash `tasks` (`found`: code -> options or false, the caller's cache for one call).
-- False when the code names nothing there (the hash is missing, of another type, or lost
-- the code): that job's problem, not the call's. True for a spec without a code.
local function task_path(tasks, parts, found)
  if not parts.coded then return true end
  local code = parts[1]
  local options = found[code]
  if options == nil then
    options = #code > 1 and tasks and redis.pcall('HGET', tasks, code)
    options = type(options) == 'string' and split_options(options) or false
    found[code] = options
  end
  if not options then return false end
  parts[1], parts[4], parts[5], parts.coded = options[1], options[2], options[3], nil
  return true
end
