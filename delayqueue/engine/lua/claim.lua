-- claim: scheduled -> inflight for a batch of due jobs, each with a fresh fencing token.
-- A job whose data cannot run (missing, malformed, a field out of bounds, a key that is not
-- a hash, a due time past year 9999) goes to dead with a reason instead.
-- KEYS[1] scheduled zset                dq:{Q}:scheduled
-- KEYS[2] inflight zset                 dq:{Q}:inflight
-- KEYS[3] job hash prefix               dq:{Q}:job:
-- KEYS[4] paused flag                   dq:{Q}:paused
-- KEYS[5] this minute's stats hash      dq:{Q}:stats:<minute>
-- KEYS[6] dead zset                     dq:{Q}:dead
-- KEYS[7] specs bucket prefix           dq:{Q}:specs: (a never-claimed job's spec moves
--         from its bucket, KEYS[7] .. the id's last two characters, into its hash here)
-- KEYS[8] limit state prefix            dq:{Q}:limit:  (_limits.lua: a limited job starts only
--         when its rate and concurrency allow; else it stays scheduled, due again when they
--         next may, so no job is lost and none is polled for)
-- KEYS[9] dedupe hash                   dq:{Q}:keys    (an expired job's key is let go; one
--         of another type is left as it is, and the claim goes on)
-- KEYS[10] tasks hash                   dq:{Q}:tasks   (a coded spec's code -> its task, max
--         attempts and visibility, which the job's hash gets: _spec.lua; a code it lacks
--         sends that job to dead)
-- ARGV[1] most jobs to claim
-- ARGV[2] visibility timeout ms for jobs that set none of their own (doubled per earlier
--         dispatch that never started, up to 32 times)
-- ARGV[3] stats ttl seconds
-- ARGV[4] ahead ms: jobs due within this many ms from now are claimed too (DISPATCH_AHEAD:
--         the Celery side holds each until its due time, so it starts on time)
-- Returns {now ms, next due ms or -1, next deadline ms or -1, paused 0|1,
--          {{id, token, attempt, task, args json, kwargs json or "", due ms
--            [, trace context when the job keeps one]}, ...},
--          and, when a job expired or a limit held one: {id of each job sent to dead as
--          expired, ...}, jobs a limit kept scheduled}
-- #include _now.lua
-- #include _bounds.lua
-- #include _due.lua
-- #include _types.lua
-- #include _foreign.lua
-- #include _spec.lua
-- #include _stats.lua
-- #include _chunked.lua
-- #include _limits.lua
-- #include _dedupe.lua
local now = now_ms()
local limit = number_in(ARGV[1], 0, 1e6)
local default_vt = number_in(ARGV[2], 0, MAX_VT_MS)
local ttl = number_in(ARGV[3], 1, 1e9)
local ahead = number_in(ARGV[4], 0, MAX_AHEAD_MS)
if not (limit and default_vt and ttl and ahead) then
  return redis.error_reply('ERR claim: ARGV is a limit, a visibility ms, a stats ttl and an '
                           .. 'ahead ms')
end
local bad = wrong_type({KEYS[1], 'zset', KEYS[2], 'zset', KEYS[6], 'zset'})
if bad then return bad end

-- The head's score as an integer within the bounds of a time (a stray -inf or +inf score
-- is not a time the worker can sleep until), or -1 when the zset is empty.
local function head_score(zset)
  local head = redis.call('ZRANGE', zset, 0, 0, 'WITHSCORES')
  if not head[2] then return -1 end
  local score = tonumber(head[2])
  if score ~= score then return now end
  return math.floor(math.max(MIN_TIME_MS, math.min(MAX_TIME_MS, score)))
end

if redis.call('EXISTS', KEYS[4]) == 1 then
  return {now, -1, head_score(KEYS[2]), 1, {}}
end

-- Due jobs (and those due within `ahead` ms), and jobs due after year 9999 (no time
-- delayqueue writes: corrupt, to dead).
local ids, far, due_of = due_ids(KEYS[1], now + ahead, limit, true)
local paths = {}  -- code -> task options (task_path's cache for this call)

-- What claiming job `id` would do, from reads only: {ok = true, ...} or {why = reason, ...}.
local function examine(id, far_due)
  local job = KEYS[3] .. id
  local f = hash_fields(job, 'task', 'args', 'kwargs', 'max', 'vt', 'key', 'tok', 'att', 'rp',
                        'tc', 'lim', 'exp')
  -- Its packed spec, in its bucket (one that is not a hash holds none, and is left to
  -- whoever wrote it).
  local bucket = spec_bucket(KEYS[7], id)
  local spec, bucket_type = bucket_spec(bucket, id)
  local plan = {id = id, job = job, spec = spec, from = bucket, foreign = not f}
  plan.fresh = f and not (f[1] or f[2] or f[3] or f[4] or f[5] or f[6] or f[10])  -- no spec
  if spec then
    plan.parts = split_spec(spec)
    if spec == '\n\n\n\n\n' then plan.parts = nil end
    if plan.parts and not task_path(KEYS[10], plan.parts, paths) then
      plan.parts, plan.code = nil, plan.parts[1]
    end
  end
  if not f then
    plan.why = 'corrupt job data: its Redis key is a ' .. key_type(job) .. ', not a hash'
    return plan
  end
  if plan.code then
    plan.why = 'corrupt job data: its packed spec names its task by a code that ' ..
               (KEYS[10] or 'the tasks hash') .. ' does not hold'
    return plan
  end
  if spec and not plan.parts then
    plan.why = 'corrupt job data: its packed spec has fewer than 6 fields'
    return plan
  end
  if plan.parts then  -- the packed spec is the job's current spec
    for i = 1, 5 do f[i] = plan.parts[i] ~= '' and plan.parts[i] end
    f[6], f[10] = plan.parts[7] ~= '' and plan.parts[7], plan.parts[6] ~= '' and plan.parts[6]
  end
  if far_due then
    plan.why = 'corrupt job data: its due time is after year 9999'
  elseif not (f[1] and f[2]) and bucket_type then
    plan.why = 'corrupt job data: its specs bucket ' .. bucket .. ' is a ' .. bucket_type ..
               ', not a hash'
  elseif not (f[1] and f[2]) then
    plan.why = 'job data missing or incomplete in Redis'
  elseif f[5] and not number_in(f[5], 1, MAX_VT_MS) then
    plan.why = 'corrupt job data: vt is not a number of ms from 1 to 10^12'
  elseif not max_attempts(f[4], 1) then
    plan.why = 'corrupt job data: max is not an integer from 1 to 10^9'
  elseif not (counter(f[7]) and counter(f[8]) and counter(f[9])) then
    plan.why = 'corrupt job data: tok, att or rp is not an integer'
  elseif f[11] and not parse_limits(f[11]) then
    plan.why = 'corrupt job data: lim is not a rate, a window, a concurrency and a key'
  elseif f[12] and not expired_at(f[12]) then
    plan.why = 'corrupt job data: exp is not a time in ms'
  elseif f[12] and now > expired_at(f[12]) then
    plan.why = 'expired'
    plan.expired = f[6] or true
  else
    plan.ok = true
    plan.fields = f
    if f[11] then plan.limits = parse_limits(f[11]) end  -- (no call for a job without)
  end
  return plan
end

local plans = {}
for _, id in ipairs(ids) do plans[#plans + 1] = examine(id, false) end
for _, id in ipairs(far) do plans[#plans + 1] = examine(id, true) end

-- Writes, in an order that cannot lose a job: its hash first, then the zset it goes to,
-- and only then its removal from scheduled.
local claimed, deadlines, buried, gone = {}, {}, {}, {}
local expired, gate, held = {}, {}, 0
-- A limited job over its limit is only due again later (defer_until): nothing else of it
-- changes. The others are claimed or buried.
local function over_limit(plan)
  if not (plan.ok and plan.limits and KEYS[8]) then return false end
  local l = plan.limits
  plan.base = limit_base(KEYS[8], plan.fields[1], l)
  plan.at = math.max(now, tonumber(due_of[plan.id]) or now)
  local ok, rate_full, conc_full = limit_gate(gate, plan.base, l, now, plan.at)
  if ok then return false end
  local due = defer_until(gate, plan.base, l, plan.id, now, rate_full, conc_full)
  redis.call('ZADD', KEYS[1], due, plan.id)
  held = held + 1
  return true
end
for _, plan in ipairs(plans) do
  local id, job = plan.id, plan.job
  if not (plan.limits and over_limit(plan)) then  -- (no call for a job without limits)
    if plan.foreign then replace_foreign(job, plan.why) end
    -- The new fencing token and attempt (checked integers of at most 15 digits: exact), set
    -- with the unpacked spec in one HSET.
    local counters = plan.ok and {'tok', counter(plan.fields[7]) + 1,
                                  'att', counter(plan.fields[8]) + 1}
    if plan.parts then
      write_spec(job, plan.parts, counters, plan.fresh)
    else
      if plan.spec then  -- kept for people to look at
        redis.call('HSET', job, plan.foreign and 'raw_spec' or 'raw', plan.spec)
      end
      if counters then redis.call('HSET', job, unpack(counters)) end
    end
    if plan.spec then redis.call('HDEL', plan.from, id) end
    if plan.ok then
      local f = plan.fields
      local token, attempt = counters[2], counters[4]
      -- Each earlier dispatch that timed out before its task even started (lost, or stuck
      -- behind a Celery backlog) doubles the time this one gets: no re-dispatch storm.
      local redispatched = math.max(0, math.min(counter(f[9]), 5))
      local deadline = now + (tonumber(f[5]) or default_vt) * 2 ^ redispatched
      deadlines[#deadlines + 1] = deadline
      deadlines[#deadlines + 1] = id
      local row = {id, token, attempt, f[1], f[2], f[3] or '', due_of[id] or ''}
      if f[10] then row[8] = f[10] end  -- its trace context, only when it keeps one
      claimed[#claimed + 1] = row
      if plan.base then
        admit(gate, plan.base, plan.limits, id, token, now, plan.at, deadline)
      end
    else
      if not plan.foreign then redis.call('HSET', job, 'why', plan.why) end
      if plan.expired then
        expired[#expired + 1] = id
        if plan.expired ~= true and KEYS[9] and key_type(KEYS[9]) == 'hash' then
          release_key(KEYS[9], plan.expired, id)  -- (a dedupe hash of another type: kept)
        end
      end
      buried[#buried + 1] = now
      buried[#buried + 1] = id
    end
    gone[#gone + 1] = id
  end
end
flush_limits(gate)
chunked('ZADD', KEYS[2], deadlines, 2)
chunked('ZADD', KEYS[6], buried, 2)
chunked('ZREM', KEYS[1], gone, 1)
if #claimed > 0 then count_stat(KEYS[5], 'dispatched', #claimed, ttl) end
if #expired > 0 then count_stat(KEYS[5], 'expired', #expired, ttl) end
if held > 0 then count_stat(KEYS[5], 'limited', held, ttl) end
if #expired == 0 and held == 0 then
  return {now, head_score(KEYS[1]), head_score(KEYS[2]), 0, claimed}
end
return {now, head_score(KEYS[1]), head_score(KEYS[2]), 0, claimed, expired, held}
