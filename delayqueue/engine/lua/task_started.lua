-- task_started: a Django task's job begins an attempt on the Celery worker
-- (delayqueue/django_tasks/attempts.py). Its results hash says RUNNING, for the job's
-- current attempt, on this worker, and the same step reads back what earlier attempts
-- recorded there: the attempt's prelude is one round trip, not a read and then a write.
-- The fields are TaskResultField's (delayqueue/engine/keys.py); the job's are JobField's.
-- KEYS[1] the job's results hash        dq:{Q}:result:<id>
-- KEYS[2] job hash                      dq:{Q}:job:<id>
-- ARGV[1] now ms: the attempt's start (and the first attempt's, when none started before)
-- ARGV[2] the Celery worker's id, appended to the workers (the last ARGV[4] kept)
-- ARGV[3] ttl seconds of the results hash, from now
-- ARGV[4] workers kept
-- ARGV[5] the dispatch's fencing token, or "" (see below)
-- ARGV[6] task, ARGV[7] args, ARGV[8] kwargs, ARGV[9] backend, ARGV[10] prio,
-- ARGV[11] status: written as they are
-- Returns {the attempt (the job's attempts begun; 1 when it has none), its max attempts
-- ("": the default; "0": not readable, the job dies at its next failure)}, and when the
-- results hash held no history (a first attempt's start: it then holds ARGV[1] as its
-- started and last, ARGV[2] alone as its workers, no errors) nothing more; else, after
-- those two, the results hash's started, last, workers and errors as written ("" when
-- absent), all made UTF-8. A job hash that is not a hash reads as none. Safe to send twice.
-- Sent in the same round trip as the job's begin, right after it (the runner's riders:
-- delayqueue/runner/riders.py), ARGV[5] is the dispatch's fencing token: the start is
-- written only when that begin let the dispatch run (the job's current token, and begun by
-- it), else nothing is written and the reply is {} (a stale, expired or rate-limited
-- dispatch does not run). "" writes the start whatever the job's state.
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
local now = whole(ARGV[1], MIN_TIME_MS, MAX_TIME_MS)
local ttl = whole(ARGV[3], 1, 1e9)
local kept = whole(ARGV[4], 1, 1000)
if not now or not ttl or not kept or #ARGV ~= 11 then
  return redis.error_reply('ERR task_started: ARGV is now ms, worker, ttl s, kept, token, ' ..
                           'task, args, kwargs, backend, prio, status')
end
-- What earlier attempts recorded there (a first start's hash is empty: its length says so,
-- cheaper than a read of its fields); a results key of another type is an error, and is
-- left alone.
local before = redis.pcall('HLEN', KEYS[1])
if before ~= 0 then
  before = redis.pcall('HMGET', KEYS[1], 'workers', 'att', 'last', 'started', 'errors',
                       'finished', 'ret')
else
  before = {}
end
if before.err then
  return redis.error_reply('WRONGTYPE delayqueue: ' .. KEYS[1] .. ' is a ' ..
                           key_type(KEYS[1]) .. ', not a hash')
end
local job = hash_fields(KEYS[2], 'att', 'max', 'tok', 'began') or {}
if ARGV[5] ~= '' and not (job[3] == ARGV[5] and job[4] == ARGV[5]) then return {} end
-- The attempt that writes the status: the job's, counted by claim (1 when it has none).
local att = job[1]
if not att or not string.match(att, '^%d+$') or #att > 15 then att = '1' end
-- Max attempts as fail.lua reads them: "" when not stored (the default), "0" when not an
-- integer in bounds (fail.lua sends the job to dead at its next failure).
local max_text = ''
if job[2] then
  local n = max_attempts(job[2], nil)
  max_text = n and string.format('%d', n) or '0'
end
local worker = utf8_text(ARGV[2])
local stored = before[1]
if not (stored or before[2] or before[3] or before[4] or before[5] or before[6]
        or before[7]) then
  -- a first start: nothing to read back, nothing to delete
  redis.call('HSET', KEYS[1], 'task', ARGV[6], 'args', ARGV[7], 'kwargs', ARGV[8],
             'backend', ARGV[9], 'prio', ARGV[10], 'status', ARGV[11], 'att', att,
             'last', ARGV[1], 'started', ARGV[1], 'workers', cjson.encode({worker}))
  redis.call('EXPIRE', KEYS[1], ttl)
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
local resent = before[2] == att and before[3] == ARGV[1] and earlier[#earlier] == worker
local workers = {}
local from = #earlier - kept + (resent and 1 or 2)
for i = math.max(1, from), #earlier do workers[#workers + 1] = earlier[i] end
if not resent or #workers == 0 then workers[#workers + 1] = worker end
local encoded = cjson.encode(workers)
-- (an earlier attempt's outcome: a first attempt's hash has none to delete)
if before[6] or before[7] then redis.call('HDEL', KEYS[1], 'finished', 'ret') end
-- The first attempt's start stays; one that is no time (cut off, planted, past the year
-- 9999) is this one.
local started = before[4]
if not whole(started, 0, MAX_TIME_MS) then started = ARGV[1] end
redis.call('HSET', KEYS[1], 'task', ARGV[6], 'args', ARGV[7], 'kwargs', ARGV[8],
           'backend', ARGV[9], 'prio', ARGV[10], 'status', ARGV[11], 'att', att,
           'last', ARGV[1], 'started', started, 'workers', encoded)
redis.call('EXPIRE', KEYS[1], ttl)
return {att, max_text, utf8_text(started), ARGV[1], utf8_text(encoded),
        before[5] and utf8_text(before[5]) or ''}
