-- resume: a paused queue -> claimed from again, and its delay workers woken (PUBLISH on
-- the queue's wake channel) so the jobs that came due meanwhile go at once.
-- KEYS[1] paused flag                   dq:{Q}:paused
-- ARGV[1] the queue's wake channel      dq:{Q}:wake
-- Returns 1 when the queue was paused, 0 when it was not (nothing published).
if redis.call('DEL', KEYS[1]) == 0 then return 0 end
redis.call('PUBLISH', ARGV[1], 'resumed')
return 1
