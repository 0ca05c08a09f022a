-- reap: inflight -> scheduled (due now) or dead, for jobs whose visibility deadline passed.
-- A task that started and did not finish (a Celery worker died) used an attempt: at
-- max attempts the job goes to dead. A dispatch that never started (lost by a crashed delay
-- worker, dropped by a Celery worker that could not decode its message, or still queued
-- behind a Celery backlog) is not an attempt: the job goes back, and its next dispatch gets
-- twice the time (claim.lua reads 'rp'), until MAX_NOT_STARTED dispatches in a row never
-- started: then it goes to dead. With the doubling capped at 32x, that is 191 visibility
-- timeouts after the first dispatch (16 hours at the default 5 minutes).
-- A deadline after year 9999 is no deadline delayqueue wrote: such a job is reaped too.
-- KEYS[1] inflight zset                 dq:{Q}:inflight
-- KEYS[2] scheduled zset                dq:{Q}:scheduled
-- KEYS[3] dead zset                     dq:{Q}:dead
-- KEYS[4] job hash prefix               dq:{Q}:job:
-- KEYS[5] dedupe hash                   dq:{Q}:keys
-- KEYS[6] limit state prefix, optional  dq:{Q}:limit:  (a reaped job's slot comes back:
--         _limits.lua)
-- ARGV[1] most jobs to reap
-- ARGV[2] max attempts when the job stores none
-- ARGV[3] wake channel, optional
-- Returns {jobs rescheduled, jobs moved to dead}.
-- #include _now.lua
-- #include _bounds.lua
-- #include _due.lua
-- #include _types.lua
-- #include _foreign.lua
-- #include _history.lua
-- #include _dedupe.lua
-- #include _chunked.lua
-- #include _limits.lua
local MAX_NOT_STARTED = 10
local now = now_ms()
local limit = number_in(ARGV[1], 0, 1e6)
local default_max = max_attempts(ARGV[2], nil)
if not (limit and default_max) then
  return redis.error_reply('ERR reap: ARGV is a limit and a default max attempts (1 to 10^9)')
end
local bad = wrong_type({KEYS[1], 'zset', KEYS[2], 'zset', KEYS[3], 'zset', KEYS[5], 'hash'})
if bad then return bad end

local ids, far = due_ids(KEYS[1], now, limit)
for _, id in ipairs(far) do ids[#ids + 1] = id end

-- What reaping job `id` would do, from reads only.
local function examine(id)
  local job = KEYS[4] .. id
  local plan = {id = id, job = job}
  local f = hash_fields(job, 'att', 'max', 'key', 'hist', 'task', 'tok', 'began', 'rp',
                       'lim')
  if not f then
    plan.foreign = true
    plan.why = 'corrupt job data: its Redis key is a ' .. key_type(job) .. ', not a hash'
    return plan
  end
  plan.key = f[3]
  plan.task, plan.lim = f[5], f[9]
  if not f[5] then
    plan.why = 'job data missing or incomplete in Redis'
    return plan
  end
  local attempt, max, rp = counter(f[1]), max_attempts(f[2], default_max), counter(f[8])
  if not (attempt and max and rp) then
    plan.why = 'corrupt job data: att, max or rp is not an integer in bounds'
    return plan
  end
  local started = f[7] and f[7] == f[6]
  local entry
  if not started then
    if attempt > 0 then attempt = attempt - 1 end
    rp = math.max(0, rp) + 1
    plan.set = {'att', attempt, 'rp', rp}
    entry = {at = now, attempt = attempt + 1, outcome = 'not started',
             detail = 'dispatched but not started before the visibility deadline'}
    if rp >= MAX_NOT_STARTED then
      plan.why = 'dispatched ' .. rp .. ' times and never started'
    end
  else
    plan.set = {}
    entry = {at = now, attempt = attempt, outcome = 'timed out',
             detail = 'started but no ack before the visibility deadline'}
    if attempt >= max then
      plan.why = 'visibility timeout expired after ' .. attempt .. ' of ' .. max .. ' attempts'
    end
  end
  plan.set[#plan.set + 1] = 'hist'
  plan.set[#plan.set + 1] = history_with(f[4], entry)
  return plan
end

local plans = {}
for _, id in ipairs(ids) do plans[#plans + 1] = examine(id) end

-- Writes, in an order that cannot lose a job: its hash, the zset it goes to, and only
-- then its removal from inflight.
local back, dead, to_scheduled, to_dead = 0, 0, {}, {}
for _, plan in ipairs(plans) do
  if plan.foreign then
    replace_foreign(plan.job, plan.why)
  elseif plan.set then
    redis.call('HSET', plan.job, unpack(plan.set))
  end
  if plan.lim then release_slot(KEYS[6], plan.task, plan.lim, plan.id, KEYS[2], ARGV[3], now) end
  if plan.why then
    if not plan.foreign then redis.call('HSET', plan.job, 'why', plan.why) end
    release_key(KEYS[5], plan.key, plan.id)
    to_dead[#to_dead + 1] = now
    to_dead[#to_dead + 1] = plan.id
    dead = dead + 1
  else
    to_scheduled[#to_scheduled + 1] = now
    to_scheduled[#to_scheduled + 1] = plan.id
    back = back + 1
  end
end
chunked('ZADD', KEYS[2], to_scheduled, 2)
chunked('ZADD', KEYS[3], to_dead, 2)
chunked('ZREM', KEYS[1], ids, 1)
return {back, dead}
