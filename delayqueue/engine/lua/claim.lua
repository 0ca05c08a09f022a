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
-- ARGV[1] most jobs to claim
-- ARGV[2] visibility timeout ms for jobs that set none of their own (doubled per earlier
--         dispatch that never started, up to 32 times)
-- ARGV[3] stats ttl seconds
-- ARGV[4] ahead ms: jobs due within this many ms from now are claimed too (DISPATCH_AHEAD:
--         the Celery side holds each until its due time, so it starts on time)
-- Returns {now ms, next due ms or -1, next deadline ms or -1, paused 0|1,
--          {{id, token, attempt, task, args json, kwargs json or "", due ms
--            [, trace context when the job keeps one]}, ...}}
-- #include _now.lua
-- #include _bounds.lua
-- #include _due.lua
-- #include _types.lua
-- #include _foreign.lua
-- #include _spec.lua
-- #include _stats.lua
-- #include _chunked.lua
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

-- What claiming job `id` would do, from reads only: {ok = true, ...} or {why = reason, ...}.
local function examine(id, far_due)
  local job = KEYS[3] .. id
  local f = hash_fields(job, 'task', 'args', 'kwargs', 'max', 'vt', 'key', 'tok', 'att', 'rp',
                        'tc')
  -- Its packed spec, in its bucket (one that is not a hash holds none, and is left to
  -- whoever wrote it).
  local bucket = spec_bucket(KEYS[7], id)
  local spec, bucket_type = bucket_spec(bucket, id)
  local plan = {id = id, job = job, spec = spec, from = bucket, foreign = not f}
  plan.fresh = f and not (f[1] or f[2] or f[3] or f[4] or f[5] or f[6] or f[10])  -- no spec
  if spec then
    plan.parts = split_spec(spec)
    if spec == '\n\n\n\n\n' then plan.parts = nil end
  end
  if not f then
    plan.why = 'corrupt job data: its Redis key is a ' .. key_type(job) .. ', not a hash'
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
  else
    plan.ok = true
    plan.fields = f
  end
  return plan
end

local plans = {}
for _, id in ipairs(ids) do plans[#plans + 1] = examine(id, false) end
for _, id in ipairs(far) do plans[#plans + 1] = examine(id, true) end

-- Writes, in an order that cannot lose a job: its hash first, then the zset it goes to,
-- and only then its removal from scheduled.
local claimed, deadlines, buried, gone = {}, {}, {}, {}
for _, plan in ipairs(plans) do
  local id, job = plan.id, plan.job
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
  else
    if not plan.foreign then redis.call('HSET', job, 'why', plan.why) end
    buried[#buried + 1] = now
    buried[#buried + 1] = id
  end
  gone[#gone + 1] = id
end
chunked('ZADD', KEYS[2], deadlines, 2)
chunked('ZADD', KEYS[6], buried, 2)
chunked('ZREM', KEYS[1], gone, 1)
if #claimed > 0 then count_stat(KEYS[5], 'dispatched', #claimed, ttl) end
return {now, head_score(KEYS[1]), head_score(KEYS[2]), 0, claimed}
