-- enqueue: (new) -> scheduled, for one job or a batch of jobs of one queue, honouring each
-- job's dedupe key (keep: the existing job stays; replace: it moves and takes the new data);
-- one wake-up when the batch changed the earliest job.
-- KEYS[1] scheduled zset                dq:{Q}:scheduled
-- KEYS[2] inflight zset                 dq:{Q}:inflight
-- KEYS[3] dedupe hash                   dq:{Q}:keys
-- KEYS[4] job hash prefix               dq:{Q}:job:   (a job's hash is KEYS[4] .. id)
-- ARGV[1] wake channel, published when the batch changed the earliest job
-- ARGV[2..] per job: id, "delay" | "at", ms, dedupe key or "", "keep" | "replace", n, then
--           n strings: job hash field, value, field, value, ...
-- Returns per job {id, due ms, "created" | "kept" | "replaced", "scheduled" | "inflight"}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local before = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')

local function enqueue(id, mode, ms, key, conflict, fields)
  local due = tonumber(ms)
  if mode == 'delay' then due = now + due end
  if key ~= '' then
    fields[#fields + 1] = 'key'
    fields[#fields + 1] = key
    local existing = redis.call('HGET', KEYS[3], key)
    if existing then
      local score = redis.call('ZSCORE', KEYS[1], existing)
      if score then
        if conflict == 'keep' then return {existing, score, 'kept', 'scheduled'} end
        local job = KEYS[4] .. existing
        local keep = redis.call('HMGET', job, 'att', 'tok', 'hist')
        redis.call('DEL', job)
        redis.call('HSET', job, unpack(fields))
        if keep[1] then redis.call('HSET', job, 'att', keep[1]) end
        if keep[2] then redis.call('HSET', job, 'tok', keep[2]) end
        if keep[3] then redis.call('HSET', job, 'hist', keep[3]) end
        redis.call('ZADD', KEYS[1], due, existing)
        return {existing, due, 'replaced', 'scheduled'}
      end
      local deadline = redis.call('ZSCORE', KEYS[2], existing)
      if deadline and conflict == 'keep' then
        return {existing, deadline, 'kept', 'inflight'}
      end
    end
    redis.call('HSET', KEYS[3], key, id)
  end
  redis.call('HSET', KEYS[4] .. id, unpack(fields))
  redis.call('ZADD', KEYS[1], due, id)
  return {id, due, 'created', 'scheduled'}
end

local replies = {}
local i = 2
while i <= #ARGV do
  local n = tonumber(ARGV[i + 5])
  local fields = {}
  for j = 1, n do fields[j] = ARGV[i + 5 + j] end
  replies[#replies + 1] = enqueue(ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4],
                                  fields)
  i = i + 6 + n
end

local after = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if after[1] and (after[1] ~= before[1] or after[2] ~= before[2]) then
  redis.call('PUBLISH', ARGV[1], after[2])
end
return replies
