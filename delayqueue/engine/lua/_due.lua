-- Provides due_ids(): the members of a zset of times (scheduled, inflight) that are due.
-- #include _bounds.lua

-- Up to `limit` members of `zset` scored at or before `now`, and up to `limit` scored after
-- year 9999 (no time delayqueue writes: corrupt data, which the caller sends to dead).
local function due_ids(zset, now, limit)
  local ids = redis.call('ZRANGEBYSCORE', zset, '-inf', now, 'LIMIT', 0, limit)
  local far = redis.call('ZRANGEBYSCORE', zset, '(' .. string.format('%.0f', MAX_TIME_MS),
                         '+inf', 'LIMIT', 0, limit)
  return ids, far
end
