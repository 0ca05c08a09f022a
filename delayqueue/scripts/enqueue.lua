-- enqueue: (new) -> scheduled, honouring the dedupe key.
-- KEYS[1] job hash of the new id        dq:{Q}:job:<id>
-- KEYS[2] scheduled zset                dq:{Q}:scheduled
-- KEYS[3] inflight zset                 dq:{Q}:inflight
-- KEYS[4] dedupe hash                   dq:{Q}:keys
-- KEYS[5] job hash prefix               dq:{Q}:job:   (existing jobs are KEYS[5] .. id)
-- ARGV[1] job id
-- ARGV[2] "delay" (ARGV[3] is ms from Redis's now) or "at" (ARGV[3] is an epoch ms)
-- ARGV[3] milliseconds
-- ARGV[4] dedupe key, "" for none
-- ARGV[5] on conflict: "keep" or "replace"
-- ARGV[6] wake channel, published when this job becomes the earliest
-- ARGV[7..] job hash field, value, field, value, ... (the script adds 'key')
-- Returns {id, due ms, "created" | "kept" | "replaced", "scheduled" | "inflight"}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local id, key, conflict = ARGV[1], ARGV[4], ARGV[5]
local due = tonumber(ARGV[3])
if ARGV[2] == 'delay' then due = now + due end

local function wake_if_head(job_id)
  local head = redis.call('ZRANGE', KEYS[2], 0, 0)
  if head[1] == job_id then redis.call('PUBLISH', ARGV[6], due) end
end

local fields = {}
for i = 7, #ARGV do fields[#fields + 1] = ARGV[i] end
if key ~= '' then
  fields[#fields + 1] = 'key'
  fields[#fields + 1] = key
end

if key ~= '' then
  local existing = redis.call('HGET', KEYS[4], key)
  if existing then
    local score = redis.call('ZSCORE', KEYS[2], existing)
    if score then
      if conflict == 'keep' then return {existing, score, 'kept', 'scheduled'} end
      local job = KEYS[5] .. existing
      local keep = redis.call('HMGET', job, 'att', 'tok', 'hist')
      redis.call('DEL', job)
      redis.call('HSET', job, unpack(fields))
      if keep[1] then redis.call('HSET', job, 'att', keep[1]) end
      if keep[2] then redis.call('HSET', job, 'tok', keep[2]) end
      if keep[3] then redis.call('HSET', job, 'hist', keep[3]) end
      redis.call('ZADD', KEYS[2], due, existing)
      wake_if_head(existing)
      return {existing, due, 'replaced', 'scheduled'}
    end
    local deadline = redis.call('ZSCORE', KEYS[3], existing)
    if deadline and conflict == 'keep' then
      return {existing, deadline, 'kept', 'inflight'}
    end
  end
  redis.call('HSET', KEYS[4], key, id)
end

redis.call('HSET', KEYS[1], unpack(fields))
redis.call('ZADD', KEYS[2], due, id)
wake_if_head(id)
return {id, due, 'created', 'scheduled'}
