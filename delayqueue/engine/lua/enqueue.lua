-- enqueue: (new) -> scheduled, for one job or a batch of jobs of one queue, honouring each
-- job's dedupe key (keep: the existing job stays; replace: it moves and takes the new spec);
-- one wake-up when the call made one of its jobs the earliest.
-- KEYS[1] scheduled zset                dq:{Q}:scheduled
-- KEYS[2] inflight zset                 dq:{Q}:inflight
-- KEYS[3] dedupe hash                   dq:{Q}:keys
-- KEYS[4] job hash prefix               dq:{Q}:job:   (a job's hash is KEYS[4] .. id)
-- KEYS[5] specs bucket prefix           dq:{Q}:specs: (a job's packed spec is in the hash
--         KEYS[5] .. the id's last two characters, see _spec.lua)
-- KEYS[6] tasks hash, optional          dq:{Q}:tasks  (a spec in a bucket names its task,
--         max attempts and visibility by a code, given here on their first use: _spec.lua,
--         code_spec; without it, the spec is written as it is: transitions.enqueue_keys)
-- ARGV[1] wake channel
-- ARGV[2] wake horizon ms: a new earliest job due later than this needs no wake-up, as no
--         worker sleeps that long (conf.WAKE_HORIZON_MS)
-- ARGV[3..] per job, 7 strings: id, "delay" | "at", ms, dedupe key or "", "keep" | "replace",
--           packed spec, limits: "" or "<expires ms or ''>\n<'lim' or ''>" (_limits.lua: a
--           job with limits or an expiry gets its hash, with its spec, at once)
-- or, for plain jobs (no dedupe key, no limits: delay_for's usual job, and what delay_many
-- writes), the plain layout (engine/plain_enqueue.py):
-- ARGV[3] "plain", or "plain-first" on the first send of a call (its ids were just made,
--         so no hash of its jobs can exist: the EXISTS below is for a call sent again, and
--         every send after the first says "plain": ScriptCall.first_args)
-- ARGV[4] "delay" | "at", for every job of the call
-- ARGV[5..] per job, 3 strings: id, ms, packed spec
-- Returns per job {id, due ms, "created" | "kept" | "replaced", "scheduled" | "inflight"}
-- ("created" with the state the job is in now when this call was sent again after the job
-- was claimed: a job that has a hash is not written again.) A plain call that wrote every
-- one of its jobs as new returns only {Redis's clock in ms}: each job is "created",
-- "scheduled", due at that clock + its ms ("delay") or at its ms ("at").
-- Every argument of every job is checked before the first write: a bad one fails the call
-- and writes nothing. (A call that fails later, on a key of the wrong type, may leave its
-- task's code in the tasks hash: a name for its options, which changes no job.)
local now  -- Redis's clock in ms, read once and only when needed (clock() below)

-- One plain job whose spec is the usual one (no kwargs, trace context or key) and whose
-- task's code is in the tasks hash already (every delay_for of a task but its first) goes
-- straightest of all, as the script's very first code: a call runs the chunk up to its
-- return, and each definition on the way costs it (the includes' helpers, each a closure),
-- so what this path needs of them is written out here: Redis's clock as _now.lua's now_ms
-- reads it, the bounds of _bounds.lua's number_in (a NaN fails them: it compares false),
-- and no type() where a reply's value tells. HGET of the code, EXISTS (not on a first
-- send), ZADD NX and HSET, as the path after the helpers below does (see there), which any
-- other job, or one this path leaves, goes on to. The spec is coded as _spec.lua's
-- code_spec codes such a spec: its code, then its args. (tests/engine/test_scripts.py
-- holds the two paths alike.)
local argv = ARGV
local fresh = argv[3] == 'plain-first'  -- (its first send: see ARGV[3])
if #argv == 7 and (fresh or argv[3] == 'plain') then
  local find, sub, byte = string.find, string.sub, string.byte
  local horizon, mode, id, spec, tasks = tonumber(argv[2]), argv[4], argv[5], argv[7], KEYS[6]
  local time = redis.call('TIME')
  local us = tonumber(time[2])
  now = time[1] * 1000 + (us - us % 1000) / 1000  -- (now_ms: floor(us / 1000), exactly)
  local due = tonumber(argv[6])
  if mode == 'delay' and due and due >= 0 and due <= 253402300799999 then
    due = now + due
  elseif mode ~= 'at' then
    due = nil
  end
  local t = find(spec, '\n', 1, true)  -- the ends of the task and the args
  local a = t and find(spec, '\n', t + 1, true)
  -- max attempts "\n" visibility: what follows the args is "\n" (no kwargs), those two and
  -- "\n" (no trace context or key)
  local options = a and string.match(spec, '^\n([^\n]*\n[^\n]*)\n$', a + 1)
  -- (true without a tasks hash: the spec is written as it is)
  local code = due and due >= -62135596800000 and due <= 253402300799999
               and horizon and horizon >= 0 and horizon <= 253402300799999 and id ~= ''
               and options and t > 1 and byte(spec, 1) ~= 1 and byte(spec, t + 1) == 91
               and (not tasks or redis.pcall('HGET', tasks, sub(spec, 1, t) .. options))
  if (code == true or type(code) == 'string')
      and (fresh or redis.call('EXISTS', KEYS[4] .. id) == 0) then
    if code ~= true then spec = code .. sub(spec, t + 1, a - 1) end
    local added = redis.pcall('ZADD', KEYS[1], 'NX', due, id)  -- 1, 0 or an error
    if added == 1 or added == 0 then
      local wrote = redis.pcall('HSET', KEYS[5] .. sub(id, -2), id, spec)
      if wrote == 1 or wrote == 0 then
        if added == 0 then redis.call('ZADD', KEYS[1], due, id) end
        if due < now + horizon and redis.call('ZRANGE', KEYS[1], 0, 0)[1] == id then
          redis.call('PUBLISH', argv[1], due)  -- (_wake.lua's wake_if_head)
        end
        return {now}
      end
      if added == 1 then redis.call('ZREM', KEYS[1], id) end
    end
  end
end

-- #include _now.lua
-- #include _bounds.lua
local function clock()
  if not now then now = now_ms() end
  return now
end

local horizon = number_in(ARGV[2], 0, MAX_TIME_MS)
local plain = fresh or ARGV[3] == 'plain'

-- #include _types.lua
-- #include _spec.lua
-- #include _wake.lua
local codes = {}  -- task options -> their code (code_spec's cache for this call)

-- One plain job the path above left (its spec has kwargs or a trace context, its task's
-- code is new, or it met something unusual) goes straight here, before the rest of the
-- script's definitions (the helpers below cost this call nothing): EXISTS (not on a first
-- send) and its two writes, no TYPE. A job whose arguments are bad, or that this path
-- leaves, goes on below, as a batch of one.
if plain and #ARGV == 7 and horizon then
  local mode, id, ms, spec = ARGV[4], ARGV[5], ARGV[6], ARGV[7]
  local due
  if mode == 'delay' then
    local delay = number_in(ms, 0, MAX_TIME_MS)
    due = delay and number_in(clock() + delay, MIN_TIME_MS, MAX_TIME_MS)
  elseif mode == 'at' then
    due = number_in(ms, MIN_TIME_MS, MAX_TIME_MS)
  end
  if id ~= '' and due and is_spec(spec)
      and (fresh or redis.call('EXISTS', KEYS[4] .. id) == 0) then
    -- No TYPE: a ZADD on a key of another type fails having written nothing, and so does
    -- the HSET on a bucket of another type. NX so that a failed HSET can be undone: a
    -- member the ZADD added (1) is removed again; one already there (0: the call sent
    -- again before a claim) was not moved, and moves only once its spec is written. The
    -- script is atomic: no client sees the job in the zset without its spec in between
    -- (keyspace notifications, when turned on, do tell of the ZADD and the ZREM). In any
    -- other case (the call sent again after its job was claimed, a key of the wrong type)
    -- it leaves nothing written and goes on as a batch of one.
    local added = redis.pcall('ZADD', KEYS[1], 'NX', due, id)
    if type(added) == 'number' then
      spec = code_spec(KEYS[6], spec, codes)
      if type(redis.pcall('HSET', spec_bucket(KEYS[5], id), id, spec)) == 'number' then
        if added == 0 then redis.call('ZADD', KEYS[1], due, id) end
        if due < clock() + horizon then wake_if_head(KEYS[1], id, due, ARGV[1]) end
        return {clock()}
      end
      if added == 1 then redis.call('ZREM', KEYS[1], id) end
    end
  end
end

-- #include _limits.lua
-- #include _chunked.lua
if not horizon or (plain and ((#ARGV - 4) % 3 ~= 0 or (ARGV[4] ~= 'delay' and ARGV[4] ~= 'at')))
    or (not plain and (#ARGV - 2) % 7 ~= 0) then
  return redis.error_reply('ERR enqueue: ARGV is a wake channel, a horizon ms, then 7 per job '
                           .. '(or "plain", a mode, then 3 per job)')
end

-- The due time of `ms` in `mode`, or nil when it is not a time between years 1 and 9999.
local function due_of(mode, ms)
  if mode == 'delay' then
    local delay = number_in(ms, 0, MAX_TIME_MS)
    return delay and number_in(clock() + delay, MIN_TIME_MS, MAX_TIME_MS)
  elseif mode == 'at' then
    return number_in(ms, MIN_TIME_MS, MAX_TIME_MS)
  end
end

-- Plain jobs go straight, as a batch: every job is checked, one TYPE of the scheduled zset
-- and one EXISTS of all their job hashes tell that none of them was written before and
-- claimed (this call sent again), then one HSET per spec into its bucket, and one ZADD for
-- them all (in slices). No TYPE per bucket: an HSET on a bucket of another type fails
-- having written nothing, and the specs this call added before it are deleted again (not
-- those it found already there: the call sent again before a claim), so it leaves nothing
-- written and the general path below, which does as it always did, gives the reply (the
-- error, or each job's outcome when some job has a hash). (One job went straighter still,
-- above, unless it met something unusual.)
local J = ARGV  -- the jobs, 7 strings per job from J[3] on (the plain layout: see below)
if plain then
  local mode, dues, last_ms, last_due = ARGV[4], {}, nil, nil
  for i = 5, #ARGV, 3 do
    local ms, due = ARGV[i + 1], last_due  -- (a batch's jobs mostly share their ms)
    if ms ~= last_ms then
      due = due_of(mode, ms)
      last_ms, last_due = ms, due
    end
    if ARGV[i] == '' or not due or not is_spec(ARGV[i + 2]) then
      return redis.error_reply('ERR enqueue: plain job ' .. (i - 5) / 3 .. ' has a bad id, '
                               .. 'ms (a time between years 1 and 9999) or spec')
    end
    dues[#dues + 1] = due
  end
  local new = key_type(KEYS[1])
  new = new == 'none' or new == 'zset'
  if new and not fresh then  -- (a first send's ids were just made: none has a hash)
    local hashes = {}
    for i = 5, #ARGV, 3 do hashes[#hashes + 1] = KEYS[4] .. ARGV[i] end
    for s = 1, #hashes, 500 do
      if redis.call('EXISTS', unpack(hashes, s, math.min(s + 499, #hashes))) > 0 then
        new = false
        break
      end
    end
  end
  local added = {}  -- bucket, id, ...: the specs this call added
  if new then
    for i = 5, #ARGV, 3 do
      local id = ARGV[i]
      local bucket = spec_bucket(KEYS[5], id)
      local reply = redis.pcall('HSET', bucket, id, code_spec(KEYS[6], ARGV[i + 2], codes))
      if type(reply) ~= 'number' then
        for j = 1, #added, 2 do redis.call('HDEL', added[j], added[j + 1]) end
        new = false
        break
      end
      if reply == 1 then
        added[#added + 1] = bucket
        added[#added + 1] = id
      end
    end
  end
  if new then
    local members, first, first_id = {}, nil, nil
    for n, due in ipairs(dues) do
      local id = ARGV[2 + 3 * n]
      members[#members + 1] = due
      members[#members + 1] = id
      if not first or due < first or (due == first and id < first_id) then
        first, first_id = due, id
      end
    end
    chunked('ZADD', KEYS[1], members, 2)
    if first and first < clock() + horizon then
      wake_if_head(KEYS[1], first_id, first, ARGV[1])
    end
    return {clock()}
  end
  J = {ARGV[1], ARGV[2]}
  for i = 5, #ARGV, 3 do
    for _, value in ipairs({ARGV[i], mode, ARGV[i + 1], '', 'keep', ARGV[i + 2], ''}) do
      J[#J + 1] = value
    end
  end
end

for i = 3, #J, 7 do
  local mode, ms, conflict, extra = J[i + 1], J[i + 2], J[i + 4], J[i + 6]
  local due = due_of(mode, ms)
  if J[i] == '' or not due or (conflict ~= 'keep' and conflict ~= 'replace')
      or not is_spec(J[i + 5]) or (extra ~= '' and not limits_of(extra)) then
    return redis.error_reply('ERR enqueue: job ' .. (i - 3) / 7 .. ' has a bad id, mode, ms '
                             .. '(a time between years 1 and 9999), conflict, spec or limits')
  end
end

-- A key of the wrong type fails the call as wrong_type does, before its first write. A
-- batch checks every key it may use first (a later job must not fail once an earlier one
-- wrote). One job (one with a key or limits, or a plain one the straight path above left:
-- one TYPE instead of four) checks the scheduled zset, which it always writes, and each other key when it
-- uses it: it reads the dedupe hash and the inflight zset only before its first write,
-- and a new job's first write is the HSET of its spec into its bucket, which fails on a
-- bucket of another type having written nothing (checked() below). Replacing a job writes
-- only keys found of the right type by then.
local single = #J == 9
local bad = wrong_type(single and {KEYS[1], 'zset'}
                       or {KEYS[1], 'zset', KEYS[2], 'zset', KEYS[3], 'hash'})
if bad then return bad end
if not single then  -- the bucket each new spec goes to (the call's jobs share some)
  local buckets = {}
  for i = 3, #J, 7 do
    local bucket = spec_bucket(KEYS[5], J[i])
    if not buckets[bucket] then
      buckets[bucket] = true
      bad = wrong_type({bucket, 'hash'})
      if bad then return bad end
    end
  end
end

-- `command` on key `k` (a read, or the call's first write), which the call uses as a
-- `want`: its reply, or nil and wrong_type's error reply when `k` is of another type (the
-- command did nothing). One job returns that reply; a batch never meets it (checked above).
local function checked(want, command, k, ...)
  local reply = redis.pcall(command, k, ...)
  if type(reply) == 'table' and reply.err then return nil, wrong_type({k, want}) or reply end
  return reply
end

local earliest, earliest_id  -- the job this call wrote that sorts first

local function wrote(id, due)
  if not earliest or due < earliest or (due == earliest and id < earliest_id) then
    earliest, earliest_id = due, id
  end
end

local function enqueue(id, mode, ms, key, conflict, spec, extra)
  local limits = limits_of(extra)
  local own_hash = limits[1] or limits[2]  -- a limited job keeps its spec in its hash
  local due = tonumber(ms)
  if mode == 'delay' then due = clock() + due end
  local failed  -- the error reply of a key of the wrong type (one job only: see above)
  if key ~= '' then
    local existing
    existing, failed = checked('hash', 'HGET', KEYS[3], key)
    if failed then return failed end
    if existing and existing ~= id then  -- (the same id: this call sent again)
      local job = KEYS[4] .. existing
      local bucket = spec_bucket(KEYS[5], existing)
      local job_type = key_type(job)
      -- A job whose key holds something else than a hash, or a never-claimed one whose
      -- specs bucket is not a hash (its spec can be neither read nor replaced), is not one
      -- to keep or to write into: claim sends it to dead, and the new job takes the key.
      local foreign = job_type ~= 'hash' and job_type ~= 'none'
      local score = not foreign and redis.call('ZSCORE', KEYS[1], existing)
      if score and job_type == 'none' and wrong_type({bucket, 'hash'}) then score = false end
      if score then
        if conflict == 'keep' then return {existing, score, 'kept', 'scheduled'} end
        -- The new spec replaces the old one where the job keeps it: in its hash once it
        -- was claimed (beside the attempts and history it keeps), else in its bucket.
        if job_type == 'hash' or own_hash then
          local set, gone = limit_fields(limits, due)
          write_spec(job, split_spec(spec), set)
          if #gone > 0 then redis.call('HDEL', job, unpack(gone)) end
          redis.pcall('HDEL', bucket, existing)  -- (a bucket that is not a hash holds none)
        else
          redis.call('HSET', bucket, existing, code_spec(KEYS[6], spec, codes))
        end
        redis.call('ZADD', KEYS[1], due, existing)
        wrote(existing, due)
        return {existing, due, 'replaced', 'scheduled'}
      end
      local deadline = false
      if job_type == 'hash' then
        deadline, failed = checked('zset', 'ZSCORE', KEYS[2], existing)
        if failed then return failed end
      end
      if deadline and conflict == 'keep' then
        return {existing, deadline, 'kept', 'inflight'}
      end
    end
  end
  -- This very call, sent again after its job was claimed (it has a hash): a spec is not
  -- written beside the hash, nor is the job put back.
  if redis.call('EXISTS', KEYS[4] .. id) == 1 then
    local at
    at, failed = checked('zset', 'ZSCORE', KEYS[2], id)
    if failed then return failed end
    if at then return {id, at, 'created', 'inflight'} end
    at = redis.call('ZSCORE', KEYS[1], id)
    if at then return {id, at, 'created', 'scheduled'} end
    return {id, due, 'created', 'dead'}
  end
  -- The spec first: for one job the call's first write, which checks its bucket. The dedupe
  -- hash, read above, comes next. A limited job's spec goes to its hash (none exists).
  if own_hash then
    write_spec(KEYS[4] .. id, split_spec(spec), (limit_fields(limits, due)), true)
  else
    failed = select(2, checked('hash', 'HSET', spec_bucket(KEYS[5], id), id,
                               code_spec(KEYS[6], spec, codes)))
    if failed then return failed end
  end
  if key ~= '' then redis.call('HSET', KEYS[3], key, id) end
  redis.call('ZADD', KEYS[1], due, id)
  wrote(id, due)
  return {id, due, 'created', 'scheduled'}
end

local replies = {}
for i = 3, #J, 7 do
  local reply = enqueue(J[i], J[i + 1], J[i + 2], J[i + 3], J[i + 4],
                        J[i + 5], J[i + 6])
  if reply.err then return reply end  -- (one job, before any write: see above)
  replies[#replies + 1] = reply
end

-- A job written here is now the earliest and due soon: wake the workers sleeping until the
-- old head. (Among jobs due at the same ms the zset sorts by id, and so does wrote().)
if earliest and earliest < clock() + horizon then
  wake_if_head(KEYS[1], earliest_id, earliest, ARGV[1])
end
return replies
