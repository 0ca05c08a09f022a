-- Provides schedule() and wake_if_head(): a job put into the scheduled zset, and the
-- wake-up (PUBLISH on the queue's wake channel) of the workers sleeping until the old head
-- when that job is now the earliest.

-- Publishes `due` on `channel` when job `id` is the head of scheduled zset `sched`.
local function wake_if_head(sched, id, due, channel)
  if redis.call('ZRANGE', sched, 0, 0)[1] == id then redis.call('PUBLISH', channel, due) end
end

-- Adds (or moves) job `id` to `due` in scheduled zset `sched`, then wakes the workers if
-- it is the head now.
local function schedule(sched, id, due, channel)
  redis.call('ZADD', sched, due, id)
  wake_if_head(sched, id, due, channel)
end
