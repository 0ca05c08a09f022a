-- Provides parse_limits, limit_gate, admit, flush_limits, defer_until, release_slot,
-- limits_of, limit_fields, was_claimed and expired_at: a task's
-- deployment-wide limits (docs/limits.md).
-- A limited job has a hash from the start (enqueue.lua), whose field 'lim' is
--   "<rate>\n<window ms>\n<concurrency>\n<limit key>"   (rate or concurrency 0: none)
-- and whose field 'exp' is the ms after which it is not started (expired_at).
-- The state of one limit (a task, or a task and a limit key) lives in the queue's slot, under
-- the prefix KEYS gives (dq:{Q}:limit:), the name "<bytes of task>:<task>:<limit key>"
-- (keys.limit_name) and a suffix:
--   :r  zset  "<id>:<token>" -> the ms that dispatch starts: the sliding-window log of the
--             rate, no entry older than a window kept (PEXPIRE: a window after its last)
--   :c  zset  id -> its visibility deadline: the jobs holding a slot of the concurrency
--   :w  zset  id -> ms it began to wait: jobs over the concurrency, woken one per freed slot
--   :d  zset  id -> the ms it is due again: jobs the rate held back (defer_until)
-- A limit nobody uses expires with its keys.
-- #include _bounds.lua

local MAX_LIMIT = 1e9

-- The job's limits from its 'lim' field: {rate, window, conc, key}, or nil when it has none
-- or the field is malformed (then it is not limited: claim.lua sends it to dead first).
local parsed_limits = {}  -- lim -> its parse, within one script call (jobs share theirs)

local function parse_limits(lim)
  if not lim then return nil end
  local known = parsed_limits[lim]
  if known ~= nil then return known or nil end
  local rate, window, conc, key = string.match(lim, '^(%d+)\n(%d+)\n(%d+)\n(.*)$')
  rate, window, conc = tonumber(rate), tonumber(window), tonumber(conc)
  if not (rate and window and conc) or rate > MAX_LIMIT or conc > MAX_LIMIT
      or window < 1 or window > MAX_VT_MS or (rate == 0 and conc == 0) then
    parsed_limits[lim] = false
    return nil
  end
  local l = {rate = rate, window = window, conc = conc, key = key}
  parsed_limits[lim] = l
  return l
end

-- The key prefix of the limit `l` of task `task` under `prefix`.
local function limit_base(prefix, task, l)
  local bases = l.bases or {}
  l.bases = bases
  local base = bases[task]
  if not base then
    base = prefix .. #task .. ':' .. task .. ':' .. l.key
    bases[task] = base
  end
  return base
end

-- Sets the TTL of `k` to at least `ms` (a key that has none gets this one).
local function keep_for(k, ms)
  ms = math.max(1, math.ceil(ms))
  redis.call('PEXPIRE', k, ms, 'NX')
  redis.call('PEXPIRE', k, ms, 'GT')
end

-- Writes what admit counted for limit `base` (all of them when `base` is nil).
local function flush_limits(gate, base)
  for name, state in pairs(gate) do
    if not base or name == base then
      if #state.log > 0 then
        for i = 1, #state.log, 2000 do
          redis.call('ZADD', name .. ':r', unpack(state.log, i, math.min(#state.log, i + 1999)))
        end
        keep_for(name .. ':r', state.log_ms)
        state.log = {}
      end
      if not base and (state.held_ms or 0) > 0 then  -- (once, at the claim's end)
        keep_for(name .. ':d', state.held_ms)
        state.held_ms = 0
      end
      if #state.slots > 0 then
        for i = 1, #state.slots, 2000 do
          redis.call('ZADD', name .. ':c',
                     unpack(state.slots, i, math.min(#state.slots, i + 1999)))
        end
        keep_for(name .. ':c', state.slots_ms)
        state.slots = {}
      end
    end
  end
end

-- Whether one more job of limit `l` may start at `at` (>= now; the ms it will start): its
-- rate's log holds fewer than `rate` starts after at - window (later starts included: ones
-- claimed ahead count too, so every window holding `at` stays within the rate),
-- and fewer than `conc` jobs hold a slot. `gate` keeps per limit what one call learned and
-- the writes it owes (flush_limits): each key is read once per call, not once per job.
-- Returns ok, rate_full, conc_full.
local function limit_gate(gate, base, l, now, at)
  local state = gate[base]
  if not state then
    state = {deferred = 0, starts = 0, running = 0, waiters = 0, log = {}, slots = {},
             log_ms = 0, slots_ms = 0}
    if l.rate > 0 then
      redis.call('ZREMRANGEBYSCORE', base .. ':r', '-inf', now - l.window)
      state.starts = redis.call('ZCARD', base .. ':r')
    end
    if l.conc > 0 then
      redis.call('ZREMRANGEBYSCORE', base .. ':c', '-inf', now)
      state.running = redis.call('ZCARD', base .. ':c')
      state.waiters = redis.call('ZCARD', base .. ':w')
    end
    gate[base] = state
  end
  local rate_full = l.rate > 0 and state.starts >= l.rate
  if rate_full and at > now then
    -- Full now, but the job is claimed ahead of its due time: the window up to `at` may
    -- have room by then (counting from now, a job held until its room opens would be
    -- found due within `ahead` and held again at every pass until then: a spin).
    flush_limits(gate, base)
    rate_full = redis.call('ZCOUNT', base .. ':r', '(' .. (at - l.window), '+inf') >= l.rate
  end
  local conc_full = l.conc > 0 and state.running >= l.conc
  return not (rate_full or conc_full), rate_full, conc_full
end

-- Counts the start of dispatch `token` of job `id` at `at` against limit `l`; the job holds a
-- slot until `deadline` (or until ack, failure, reap or bury free it). Written by
-- flush_limits.
local function admit(gate, base, l, id, token, now, at, deadline)
  local state = gate[base]
  if l.rate > 0 then
    state.starts = state.starts + 1
    state.log[#state.log + 1] = at
    state.log[#state.log + 1] = id .. ':' .. token
    state.log_ms = math.max(state.log_ms, at - now + l.window)
  end
  if l.conc > 0 then
    state.running = state.running + 1
    state.slots[#state.slots + 1] = deadline
    state.slots[#state.slots + 1] = id
    state.slots_ms = math.max(state.slots_ms, deadline - now + 1000)
    if state.waiters > 0 then
      state.waiters = state.waiters - redis.call('ZREM', base .. ':w', id)
    end
  end
end

-- The rate's room for the `k`-th job (0 first) a limit holds back: the instant the log lets
-- one more start, spread as the log is (each of the oldest starts in the window makes room
-- a window later; one window later per N). `m` is the number of entries in the window; the
-- claim pruned the log up to now - window, so the window's entries are the log's first.
local function rate_room(log, l, now, m, k, pruned)
  local index = m - l.rate + (k % l.rate)
  local entry
  if pruned then  -- by rank: O(log n), whatever the rate
    entry = redis.call('ZRANGE', log, math.max(0, index), math.max(0, index), 'WITHSCORES')
  else
    entry = redis.call('ZRANGEBYSCORE', log, '(' .. (now - l.window), '+inf',
                       'WITHSCORES', 'LIMIT', math.max(0, index), 1)
  end
  local at = math.ceil(tonumber(entry[2]) or now)
  return at + l.window * (1 + math.floor(k / l.rate))
end

-- The ms a job over limit `l` is due again. Over the rate, in a claim: the jobs the limit
-- holds back wait in its :d zset (id -> due), and a job held for the first time goes after
-- every job still waiting there (k counts them, across calls), so a burst is moved about
-- once, not once per window, and a claim's work stays bounded by its batch; a job held
-- again (its room was taken, e.g. by a start that came later than its claim) goes to the
-- first room, before them. In begin (a put back, `gate` without `starts`), the first room.
-- Over the concurrency, the job waits in :w, due again at the earliest slot's deadline (the
-- finishing job wakes it before that: release_slot).
local function defer_until(gate, base, l, id, now, rate_full, conc_full)
  flush_limits(gate, base)
  local state = gate[base]
  local due = now + 1
  if rate_full and not state.starts then
    local m = redis.call('ZCOUNT', base .. ':r', '(' .. (now - l.window), '+inf')
    due = math.max(due, rate_room(base .. ':r', l, now, m, state.deferred, false))
    state.deferred = state.deferred + 1
  elseif rate_full then
    local held = base .. ':d'
    if not state.waiting then  -- the first this call holds: jobs earlier calls held
      redis.call('ZREMRANGEBYSCORE', held, '-inf', now - l.window)
      state.waiting, state.again, state.held_ms = redis.call('ZCOUNT', held, '(' .. now,
                                                             '+inf'), 0, 0
    end
    local k
    if redis.call('ZSCORE', held, id) then
      k, state.again = state.again, state.again + 1
    else
      k, state.waiting = state.waiting, state.waiting + 1
    end
    due = math.max(due, rate_room(base .. ':r', l, now, state.starts, k, true))
    redis.call('ZADD', held, math.min(due, MAX_TIME_MS), id)
    state.held_ms = math.max(state.held_ms, due - now + l.window)
  end
  if conc_full then
    local head = redis.call('ZRANGE', base .. ':c', 0, 0, 'WITHSCORES')
    local deadline = tonumber(head[2]) or now + 1
    state.waiters = state.waiters + redis.call('ZADD', base .. ':w', 'NX', now, id)
    keep_for(base .. ':w', deadline - now + 1000)
    due = math.max(due, deadline)
  end
  return math.min(due, MAX_TIME_MS)
end

-- Frees job `id`'s slot of its limit (from 'lim', task `task`) when it has one, and wakes the
-- next waiter still scheduled later than now: due now, and a wake-up on `channel`. Returns
-- the id of the job woken, or nil.
local function release_slot(prefix, task, lim, id, sched, channel, now)
  local l = prefix and task and parse_limits(lim)
  if not l or l.conc == 0 then return nil end
  local base = limit_base(prefix, task, l)
  if redis.call('ZREM', base .. ':c', id) == 0 then return nil end
  for _ = 1, 16 do
    local popped = redis.call('ZPOPMIN', base .. ':w')
    local waiter = popped[1]
    if not waiter then return nil end
    local due = tonumber(redis.call('ZSCORE', sched, waiter))
    if due and due > now then
      redis.call('ZADD', sched, now, waiter)
      if channel then redis.call('PUBLISH', channel, now) end
      return waiter
    end
  end
  return nil
end

-- A job's limits argument as {expires ms or false, 'lim' or false}; nil when malformed.
local function limits_of(extra)
  if extra == '' then return {false, false} end
  local expires, lim = string.match(extra, '^(%d*)\n(.*)$')
  if not expires or (expires ~= '' and not number_in(expires, 1, MAX_TIME_MS))
      or (lim ~= '' and not parse_limits(lim)) then
    return nil
  end
  return {expires ~= '' and tonumber(expires), lim ~= '' and lim}
end

-- The fields a job with `limits` (limits_of) due at `due` sets in its hash, and those it
-- has none of.
local function limit_fields(limits, due)
  local set, gone = {}, {}
  if limits[1] then
    set[#set + 1] = 'exp'
    set[#set + 1] = math.min(due + limits[1], MAX_TIME_MS)
  else
    gone[#gone + 1] = 'exp'
  end
  if limits[2] then
    set[#set + 1] = 'lim'
    set[#set + 1] = limits[2]
  else
    gone[#gone + 1] = 'lim'
  end
  return set, gone
end

-- Whether job `id` (hash prefix `jobs`) was ever claimed: a limited job has a hash before
-- its first claim, so the hash alone does not say; a claim always sets its token. A key of
-- another type is taken as claimed (it is left as it is).
local function was_claimed(jobs, id)
  local has = redis.pcall('HEXISTS', jobs .. id, 'tok')
  return type(has) ~= 'number' or has == 1
end

-- The ms after which the job is not started (its 'exp'), or nil for none (or malformed).
local function expired_at(exp)
  return exp and number_in(exp, MIN_TIME_MS, MAX_TIME_MS)
end
