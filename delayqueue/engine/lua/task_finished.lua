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
-- #include _task_finish.lua
local written = outcome_written(KEYS[1], 1)
if written ~= 1 then return redis.error_reply(written) end
return 1
