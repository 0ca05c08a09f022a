-- Provides the start of a Django task's attempt in its results hash (task_started.lua's
-- work, which begin.lua also does for a job whose begin carries it): start_args,
-- start_before, start_written. ARGV[o + 1] to ARGV[o + 11] are task_started.lua's ARGV 1
-- to 11 (now ms, worker, ttl s, workers kept, token, task, args, kwargs, backend, prio,
-- status); the fields are TaskResultField's (delayqueue/engine/keys.py).
-- #include _bounds.lua
-- #include _types.lua
-- #include _utf8.lua
local MAX_WORKERS_BYTES = 65536
-- An integer in [lo, hi], else nil (EXPIRE refuses a fraction, and a start that is no
-- integer would be no time to the readers).
local function whole(v, lo, hi)
  local n = number_in(v, lo, hi)
  if n and n == math.floor(n) and string.match(v, '^%-?%d+$') then return n end
  return nil
end

-- The start's ttl s and workers kept, from ARGV[o + 1...]; nil and the error's text when
-- those ARGV are not a start's.
local function start_args(o)
  local now = whole(ARGV[o + 1], MIN_TIME_MS, MAX_TIME_MS)
  local ttl = whole(ARGV[o + 3], 1, 1e9)
  local kept = whole(ARGV[o + 4], 1, 1000)
  if not now or not ttl or not kept or #ARGV ~= o + 11 then
    return nil, 'ERR task_started: ARGV is now ms, worker, ttl s, kept, token, task, ' ..
                'args, kwargs, backend, prio, status'
  end
  return ttl, kept
end

-- What earlier attempts recorded in results hash `k` (a first start's hash is empty: its
-- length says so, cheaper than a read of its fields), or nil and the error's text for a key
-- of another type (left alone).
local function start_before(k)
  local before = redis.pcall('HLEN', k)
  if before ~= 0 then
    before = redis.pcall('HMGET', k, 'workers', 'att', 'last', 'started', 'errors',
                         'finished', 'ret')
  else
    before = {}
  end
  if before.err then
    return nil, 'WRONGTYPE delayqueue: ' .. k .. ' is a ' .. key_type(k) .. ', not a hash'
  end
  return before
end

-- Writes the start into results hash `k` (`before`: start_before's) for the job's attempt
-- `att` and max attempts `max` (its hash's 'att' and 'max', as stored, or nil) on `worker`
-- (ARGV[o + 2] made UTF-8), and gives task_started.lua's reply: {attempt, max attempts
-- text}, and unless it was a first start, the hash's started, last, workers and errors as
-- written.
local function start_written(k, o, before, att, max, worker, ttl, kept)
  local now = ARGV[o + 1]
  -- The attempt that writes the status: the job's, counted by claim (1 when it has none).
  if not att or not string.match(att, '^%d+$') or #att > 15 then att = '1' end
  -- Max attempts as fail.lua reads them: "" when not stored (the default), "0" when not an
  -- integer in bounds (fail.lua sends the job to dead at its next failure).
  local max_text = ''
  if max then
    local n = max_attempts(max, nil)
    max_text = n and string.format('%d', n) or '0'
  end
  local stored = before[1]
  if not (stored or before[2] or before[3] or before[4] or before[5] or before[6]
          or before[7]) then
    -- a first start: nothing to read back, nothing to delete
    redis.call('HSET', k, 'task', ARGV[o + 6], 'args', ARGV[o + 7], 'kwargs', ARGV[o + 8],
               'backend', ARGV[o + 9], 'prio', ARGV[o + 10], 'status', ARGV[o + 11],
               'att', att, 'last', now, 'started', now, 'workers', cjson.encode({worker}))
    redis.call('EXPIRE', k, ttl)
    return {att, max_text}
  end
  -- The workers so far (a JSON list of str), this one appended; a stored list that is huge,
  -- not UTF-8 or not a JSON list of str starts afresh.
  local earlier = {}
  if stored and #stored <= MAX_WORKERS_BYTES and utf8_text(stored) == stored then
    local ok, decoded = pcall(cjson.decode, stored)
    if ok and type(decoded) == 'table' then
      for _, w in ipairs(decoded) do
        if type(w) == 'string' then earlier[#earlier + 1] = w end
      end
    end
  end
  -- The same call sent again (the connection dropped before its reply) finds its own
  -- attempt and start written: its worker is not added twice.
  local resent = before[2] == att and before[3] == now and earlier[#earlier] == worker
  local workers = {}
  local from = #earlier - kept + (resent and 1 or 2)
  for i = math.max(1, from), #earlier do workers[#workers + 1] = earlier[i] end
  if not resent or #workers == 0 then workers[#workers + 1] = worker end
  local encoded = cjson.encode(workers)
  -- (an earlier attempt's outcome: a first attempt's hash has none to delete)
  if before[6] or before[7] then redis.call('HDEL', k, 'finished', 'ret') end
  -- The first attempt's start stays; one that is no time (cut off, planted, past the year
  -- 9999) is this one.
  local started = before[4]
  if not whole(started, 0, MAX_TIME_MS) then started = now end
  redis.call('HSET', k, 'task', ARGV[o + 6], 'args', ARGV[o + 7], 'kwargs', ARGV[o + 8],
             'backend', ARGV[o + 9], 'prio', ARGV[o + 10], 'status', ARGV[o + 11],
             'att', att, 'last', now, 'started', started, 'workers', encoded)
  redis.call('EXPIRE', k, ttl)
  return {att, max_text, utf8_text(started), now, utf8_text(encoded),
          before[5] and utf8_text(before[5]) or ''}
end
