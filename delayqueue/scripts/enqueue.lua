-- enqueue: (new) -> scheduled, for one job or a batch of jobs of one queue, honouring each
-- job's dedupe key (keep: the existing job stays; replace: it moves and takes the new spec);
-- one wake-up when the call made one of its jobs the earliest.
-- KEYS[1] scheduled zset                dq:{Q}:scheduled
-- KEYS[2] inflight zset                 dq:{Q}:inflight
-- KEYS[3] dedupe hash                   dq:{Q}:keys
-- KEYS[4] job hash prefix               dq:{Q}:job:   (a job's hash is KEYS[4] .. id)
-- KEYS[5] specs hash                    dq:{Q}:specs  (id -> packed spec, see _spec.lua)
-- ARGV[1] wake channel
-- ARGV[2] wake horizon ms: a new earliest job due later than this needs no wake-up, as no
--         worker sleeps that long (conf.WAKE_HORIZON_MS)
-- ARGV[3..] per job, 6 strings: id, "delay" | "at", ms, dedupe key or "", "keep" | "replace",
--           packed spec
-- Returns per job {id, due ms, "created" | "kept" | "replaced", "scheduled" | "inflight"}
-- #include _spec.lua
local now  -- Redis's clock in ms, read once and only when needed
local function clock()
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now
end
local earliest, earliest_id  -- the job this call wrote that sorts first

local function wrote(id, due)
  if not earliest or due < earliest or (due == earliest and id < earliest_id) then
    earliest, earliest_id = due, id
  end
end

local function enqueue(id, mode, ms, key, conflict, spec)
  local due = tonumber(ms)
  if mode == 'delay' then due = clock() + due end
  if key ~= '' then
    local existing = redis.call('HGET', KEYS[3], key)
    if existing and existing ~= id then  -- (the same id: this call sent again)
      local score = redis.call('ZSCORE', KEYS[1], existing)
      if score then
        if conflict == 'keep' then return {existing, score, 'kept', 'scheduled'} end
        -- The new spec replaces the old one wherever it was (a job back from a failed
        -- attempt has it in its hash, beside the attempts and history it keeps).
        redis.call('HDEL', KEYS[4] .. existing, unpack(SPEC_FIELDS))
        redis.call('HSET', KEYS[5], existing, spec)
        redis.call('ZADD', KEYS[1], due, existing)
        wrote(existing, due)
        return {existing, due, 'replaced', 'scheduled'}
      end
      local deadline = redis.call('ZSCORE', KEYS[2], existing)
      if deadline and conflict == 'keep' then
        return {existing, deadline, 'kept', 'inflight'}
      end
    end
    redis.call('HSET', KEYS[3], key, id)
  end
  redis.call('HSET', KEYS[5], id, spec)
  redis.call('ZADD', KEYS[1], due, id)
  wrote(id, due)
  return {id, due, 'created', 'scheduled'}
end

local replies = {}
for i = 3, #ARGV, 6 do
  replies[#replies + 1] = enqueue(ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4],
                                  ARGV[i + 5])
end

-- A job written here is now the earliest and due soon: wake the workers sleeping until the
-- old head. (Among jobs due at the same ms the zset sorts by id, and so does wrote().)
if earliest and earliest < clock() + tonumber(ARGV[2])
    and redis.call('ZRANGE', KEYS[1], 0, 0)[1] == earliest_id then
  redis.call('PUBLISH', ARGV[1], earliest)
end
return replies
