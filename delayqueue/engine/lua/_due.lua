-- Provides due_ids(): the members of a zset of times (scheduled, inflight) that are due.
-- #include _bounds.lua

-- Up to `limit` members of `zset` scored at or before `now`, and up to `limit` scored after
-- year 9999 (no time delayqueue writes: corrupt data, which the caller sends to dead).
-- With `with_scores`, a third result maps each due member to its score (as Redis wrote it).
local function due_ids(zset, now, limit, with_scores)
  local ids, scores = {}, {}
  if with_scores then
    local flat = redis.call('ZRANGEBYSCORE', zset, '-inf', now, 'WITHSCORES', 'LIMIT', 0, limit)
    for i = 1, #flat, 2 do
      ids[#ids + 1] = flat[i]
      scores[flat[i]] = flat[i + 1]
    end
  else
    ids = redis.call('ZRANGEBYSCORE', zset, '-inf', now, 'LIMIT', 0, limit)
  end
  local far = redis.call('ZRANGEBYSCORE', zset, '(' .. string.format('%.0f', MAX_TIME_MS),
                         '+inf', 'LIMIT', 0, limit)
  return ids, far, scores
end
