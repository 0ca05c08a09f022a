-- task_finished: a Django task's job ends an attempt on the Celery worker
-- (delayqueue/django_tasks/attempts.py). Its results hash gets the attempt's outcome (its
-- status, when it finished, its workers, errors and times, the return value) and lives
-- RESULT_TTL seconds from now. Sent in the same round trip as the job's ack or fail, before
-- it (the runner's riders: delayqueue/runner/riders.py), so a reader never finds the job
-- gone with its result still RUNNING.
-- The fields are TaskResultField's (delayqueue/engine/keys.py).
-- KEYS[1] the job's results hash        dq:{Q}:result:<id>
-- ARGV[1] ttl seconds of the results hash, from now
-- ARGV[2...] field, value pairs written as they are (status, finished, workers, ...)
-- Returns 1. A results key of another type is an error, and is left alone. Safe to send
-- twice (the same fields written again).
local ttl = tonumber(ARGV[1])
if not ttl or ttl < 1 or ttl > 1e9 or ttl ~= math.floor(ttl) or #ARGV % 2 ~= 1 or #ARGV < 3 then
  return redis.error_reply('ERR task_finished: ARGV is ttl s, then field, value pairs')
end
-- (HSET writes nothing to a key of another type: its error is the script's)
local written = redis.pcall('HSET', KEYS[1], unpack(ARGV, 2))
if type(written) == 'table' and written.err then
  if string.sub(written.err, 1, 9) == 'WRONGTYPE' then
    return redis.error_reply('WRONGTYPE delayqueue: ' .. KEYS[1] .. ' is a ' ..
                             redis.call('TYPE', KEYS[1]).ok .. ', not a hash')
  end
  return written
end
redis.call('EXPIRE', KEYS[1], ttl)
return 1
