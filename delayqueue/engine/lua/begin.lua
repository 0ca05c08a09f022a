-- begin: inflight (dispatched) -> inflight (running). Checks the fencing token and restarts
-- the visibility deadline from the moment the task really starts. A job with a rate is
-- counted at this start (docs/limits.md): its log entry (written by its claim) moves to the
-- start's instant, and when the window up to it then holds more than the rate, the job does
-- not start: it goes back to scheduled, due when the rate next allows one more start.
-- KEYS[1] job hash                      dq:{Q}:job:<id>
-- KEYS[2] inflight zset                 dq:{Q}:inflight
-- KEYS[3] limit state prefix, optional  dq:{Q}:limit:  (a job holding a slot keeps it until
--         its new deadline: _limits.lua)
-- KEYS[4] scheduled zset, optional      dq:{Q}:scheduled (with KEYS[3]: the rate is checked
--         here, and a job over it goes back there)
-- ARGV[1] job id
-- ARGV[2] fencing token the dispatch carried
-- ARGV[3] visibility timeout ms for jobs that set none of their own
-- ARGV[4] wake channel, optional        dq:{Q}:wake (a job put back, or a waiter woken)
-- ARGV[5] horizon ms, optional          a batch (runner/batches.py) may start the job up to
--         this long after now without beginning it again: granted (at most a tenth of the
--         window) only when the window, with this job and ARGV[6] more starts, holds at most
--         half the rate (a limit far from reached: the entry counted later than the start
--         takes room from no one), and then the job's entry is counted at the horizon's end
--         (the latest it may start)
-- ARGV[6] starts the batch still makes after this job, optional (default 0)
-- Carried, optional, after all of the above (a Django task's job: its attempt's start is
-- written when the dispatch runs, as task_started.lua writes it, in this call: the job's
-- hash is read once; engine/carried.begin_starting):
--   KEYS[5] the job's results hash      dq:{Q}:result:<id>
--   ARGV[7] to ARGV[17] task_started.lua's ARGV[1] to ARGV[11] (ARGV[5] and ARGV[6] then
--           given: "0" for none)
-- Returns {1, attempt, max attempts or "", now in microseconds, 1 when the job has a rate
-- else 0, the ms its start is counted at (the latest it may start; with no rate, now)} to run (Redis's clock: a job dispatched ahead of its due time is held until then
-- by it, see attempt.hold_until_due), {0} when the token is stale (or the job's data is
-- corrupt: it does not run, and reap or the next claim sends it to dead), {2} when the job
-- expired before it could start (it does not run; the caller buries it as "expired"), {3,
-- due ms} when its rate does not allow it to start now (it does not run: it is scheduled
-- again at that due time, its attempt given back, its slot freed).
-- With KEYS[5], a reply to run has a seventh item: task_started.lua's reply, or the text of
-- the error it met (the job runs all the same: the caller decides); nothing is written
-- there for a dispatch that does not run.
-- #include _now.lua
-- #include _bounds.lua
-- #include _types.lua
-- (here, not in check_limits' _history.lua alone: a Django task's start uses it too)
-- #include _utf8.lua

-- The expiry and the limits of job `id` (its fields `f`: 'task', 'lim', 'exp' at 5 to 7),
-- for a job that has either: a reply when it does not start, else nil, whether it has a
-- rate and the ms its start is counted at. Their helpers are defined in here, so only such
-- a job pays for them (Redis runs every definition of a script at each call).
local function check_limits(f, id, now, vt, attempt)
-- #include _history.lua
-- #include _wake.lua
-- #include _limits.lua
  if expired_at(f[7]) and now > expired_at(f[7]) then return {2} end
  local l = KEYS[3] and f[5] and parse_limits(f[6])
  local base = l and limit_base(KEYS[3], f[5], l)
  local log = l and l.rate > 0 and KEYS[4] and base .. ':r'
  -- (a log of another type is left to the claim, which meets it first: not checked here)
  local log_type = log and key_type(log)
  local rated = log_type == 'zset' or log_type == 'none'
  local counted = now

  -- The rate, checked at the start. `from` is the earliest instant the job can start: now, or
  -- the due time its claim counted it at when it was claimed ahead (held until then). The
  -- window up to it, later entries included, may hold at most the rate with the job. Its
  -- entry then moves to the latest instant it may start: `from`, or with a horizon granted,
  -- `from` + horizon + 0.5 ms (the half marks an entry a begin moved ahead: begun again, the
  -- job may start now, not only at that entry).
  if rated then
    local member = id .. ':' .. ARGV[2]
    local score = tonumber(redis.call('ZSCORE', log, member))
    local from = now
    if score and score % 1 == 0 then from = math.max(now, score) end
    local starts = redis.call('ZCOUNT', log, '(' .. (from - l.window), '+inf')
    if not (score and score > from - l.window) then starts = starts + 1 end  -- with its own
    if starts > l.rate then
      local bad = wrong_type({KEYS[4], 'zset'})  -- (checked before the first write)
      if bad then return bad end
      local hist = redis.call('HGET', KEYS[1], 'hist')  -- (any value: history_with checks it)
      redis.call('ZREM', log, member)
      local gate = {[base] = {deferred = 0, log = {}, slots = {}}}
      local due = defer_until(gate, base, l, id, from, true, false)
      local set = {'hist', history_with(hist, {at = now, attempt = attempt, outcome = 'released',
                                               detail = 'over its rate at its start'})}
      if attempt > 0 then
        set[#set + 1] = 'att'
        set[#set + 1] = attempt - 1
      end
      redis.call('HSET', KEYS[1], unpack(set))
      redis.call('HDEL', KEYS[1], 'rp')  -- (it reached the Celery side: no lost dispatch)
      release_slot(KEYS[3], f[5], f[6], id, KEYS[4], ARGV[4], now)
      if ARGV[4] then
        schedule(KEYS[4], id, due, ARGV[4])
      else
        redis.call('ZADD', KEYS[4], due, id)
      end
      redis.call('ZREM', KEYS[2], id)
      return {3, due}
    end
    counted = from
    local horizon = math.min(number_in(ARGV[5] or '0', 0, MAX_VT_MS) or 0,
                             math.floor(l.window / 10))
    local after = number_in(ARGV[6] or '0', 0, 1e9) or 0
    local entry = from
    if horizon > 0 and (starts + after) * 2 <= l.rate then
      counted = from + horizon
      entry = counted + 0.5
    end
    if score and score % 1 ~= 0 and score > entry then
      -- An earlier begin of this dispatch counted it later (a resend, or a job held until its
      -- due time): kept, so the instant counted is never before the job's start.
      entry, counted = score, score - 0.5
    end
    redis.call('ZREMRANGEBYSCORE', log, '-inf', now - l.window)
    redis.call('ZADD', log, entry, member)
    keep_for(log, entry - now + l.window)
  end
  if l and l.conc > 0 then
    local running = base .. ':c'
    if redis.call('ZADD', running, 'XX', 'CH', now + vt, id) == 1 then
      keep_for(running, vt + 1000)
    end
  end
  return nil, rated, counted
end

local now_in_us = now_us()
local now = math.floor(now_in_us / 1000)
local id = ARGV[1]
local default_vt = number_in(ARGV[3], 0, MAX_VT_MS)
if not default_vt then
  return redis.error_reply('ERR begin: ARGV[3] is a visibility timeout in ms')
end
local bad = wrong_type({KEYS[2], 'zset'})
if bad then return bad end
local f = hash_fields(KEYS[1], 'tok', 'att', 'max', 'vt', 'task', 'lim', 'exp')
if not f or f[1] ~= ARGV[2] or not redis.call('ZSCORE', KEYS[2], id) then return {0} end
local vt = default_vt
if f[4] then vt = number_in(f[4], 1, MAX_VT_MS) end
local attempt = counter(f[2])
if not (vt and attempt and max_attempts(f[3], 1)) then return {0} end
local rated, counted = false, now
if f[6] or f[7] then
  local stop
  stop, rated, counted = check_limits(f, id, now, vt, attempt)
  if stop then return stop end
end
redis.call('ZADD', KEYS[2], 'XX', now + vt, id)
redis.call('HSET', KEYS[1], 'began', ARGV[2])  -- this dispatch started (see reap.lua)
redis.call('HDEL', KEYS[1], 'rp')
local reply = {1, attempt, f[3] or '', now_in_us, rated and 1 or 0, counted}
if KEYS[5] then
  -- A Django task's start (only such a job pays for its helpers' definitions)
-- #include _task_start.lua
  local ttl, kept = start_args(6)
  if not ttl then
    reply[7] = kept
  else
    local before, bad = start_before(KEYS[5])
    reply[7] = before and start_written(KEYS[5], 6, before, f[2], f[3], utf8_text(ARGV[8]),
                                        ttl, kept) or bad
  end
end
return reply
