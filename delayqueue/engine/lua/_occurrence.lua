-- Provides write_occurrence(), drop_occurrence() and trace_occurrence(): the one scheduled
-- job a schedule keeps for its next occurrence (periodic jobs: delayqueue/periodic/).
-- An occurrence is an ordinary never-claimed job: its packed spec (the schedule's, the same
-- for every occurrence) in its specs bucket, its id scored in the scheduled zset. Its id is
-- the schedule's and the instant's (periodic/identity.py): writing it twice writes it once.
-- A schedule with limits or an expiry (its record's 'lim': enqueue.lua's limits argument)
-- writes each occurrence's spec into the occurrence's own hash with them, as enqueue.lua does.
-- #include _spec.lua
-- #include _wake.lua
-- #include _limits.lua

-- Writes occurrence `id` of packed spec `spec`, due at `due`, unless a job of that id has
-- a hash already (it was claimed: that occurrence ran or is running). `sched` is the
-- scheduled zset, `specs` the specs bucket prefix, `jobs` the job hash prefix. Wakes the
-- workers when it is the new head and due within `horizon` ms of `now`.
local function write_occurrence(sched, specs, jobs, id, spec, due, channel, now, horizon,
                                limits)
  if redis.call('EXISTS', jobs .. id) == 1 then return false end
  local own = limits_of(limits or '')
  if own and (own[1] or own[2]) then
    write_spec(jobs .. id, split_spec(spec), (limit_fields(own, due)), true)
  else
    redis.call('HSET', spec_bucket(specs, id), id, spec)
  end
  redis.call('ZADD', sched, due, id)
  if due < now + horizon then wake_if_head(sched, id, due, channel) end
  return true
end

-- Removes occurrence `id` when it is still scheduled and was never claimed (no hash): the
-- run it stood for will not happen. True when it was removed.
local function drop_occurrence(sched, specs, jobs, id)
  if not id or id == '' then return false end
  if was_claimed(jobs, id) then return false end
  if redis.call('ZREM', sched, id) == 0 then return false end
  redis.pcall('HDEL', spec_bucket(specs, id), id)
  redis.call('DEL', jobs .. id)  -- (a limited occurrence's own hash: never claimed)
  return true
end

-- Gives occurrence `id`, when it was never claimed and keeps no trace context yet, the
-- context `tc` (docs/tracing.md): in its packed spec (a seventh part), or in its own hash
-- (a limited occurrence's) as 'tc'. Anything else (claimed, gone, a spec no build wrote, a
-- key of another type) is left as it is.
local function trace_occurrence(specs, jobs, id, tc)
  if not id or id == '' or was_claimed(jobs, id) then return end
  if redis.call('EXISTS', jobs .. id) == 1 then
    if redis.call('HEXISTS', jobs .. id, 'task') == 1 then
      redis.call('HSETNX', jobs .. id, 'tc', tc)
    end
    return
  end
  local bucket = spec_bucket(specs, id)
  local spec = bucket_spec(bucket, id)
  local parts = type(spec) == 'string' and split_spec(spec)
  if not parts or parts[6] ~= '' then return end
  parts[6] = tc
  redis.call('HSET', bucket, id, join_spec(parts))
end
