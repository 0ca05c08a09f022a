-- pause: a queue -> paused. claim.lua takes no job of a queue while its flag is set (jobs
-- in flight finish); resume.lua clears it.
-- KEYS[1] paused flag                   dq:{Q}:paused
-- ARGV[1] the note shown while paused (who paused it, why)
-- Returns 1 when the queue is paused now, 0 when it was paused already (its note kept).
if redis.call('SET', KEYS[1], ARGV[1], 'NX') then return 1 end
return 0
