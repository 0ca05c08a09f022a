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
-- #include _task_start.lua
local ttl, kept = start_args(0)
if not ttl then return redis.error_reply(kept) end
local before, bad = start_before(KEYS[1])
if not before then return redis.error_reply(bad) end
local job = hash_fields(KEYS[2], 'att', 'max', 'tok', 'began') or {}
if ARGV[5] ~= '' and not (job[3] == ARGV[5] and job[4] == ARGV[5]) then return {} end
return start_written(KEYS[1], 0, before, job[1], job[2], utf8_text(ARGV[2]), ttl, kept)
