-- Provides outcome_written(): how a Django task's attempt ended, written into its results
-- hash (task_finished.lua's work, which ack.lua and fail.lua also do for a job whose ack or
-- fail carries it). The fields are TaskResultField's (delayqueue/engine/keys.py).

-- Writes ARGV[o + 1...] (field, value pairs, written as they are) into results hash `k`,
-- which then lives ARGV[o] seconds from now: 1, or the error's text (bad ARGV; a key of
-- another type, left alone). Safe to run twice (the same fields written again).
local function outcome_written(k, o)
  local ttl = tonumber(ARGV[o])
  if not ttl or ttl < 1 or ttl > 1e9 or ttl ~= math.floor(ttl) or (#ARGV - o) % 2 ~= 0
      or #ARGV - o < 2 then
    return 'ERR task_finished: ARGV is ttl s, then field, value pairs'
  end
  -- (HSET writes nothing to a key of another type: its error is the script's)
  local written = redis.pcall('HSET', k, unpack(ARGV, o + 1))
  if type(written) == 'table' and written.err then
    if string.sub(written.err, 1, 9) == 'WRONGTYPE' then
      return 'WRONGTYPE delayqueue: ' .. k .. ' is a ' .. redis.call('TYPE', k).ok ..
             ', not a hash'
    end
    return written.err
  end
  redis.call('EXPIRE', k, ttl)
  return 1
end
