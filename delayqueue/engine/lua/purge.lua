-- purge: dead -> gone, for the given ids or for the oldest N dead jobs.
-- KEYS[1] dead zset                     dq:{Q}:dead
-- KEYS[2] job hash prefix               dq:{Q}:job:
-- ARGV[1] "ids" (ARGV[2..] are job ids) or "oldest" (ARGV[2] is how many)
-- Returns the number of dead jobs deleted.
-- #include _bounds.lua
-- #include _types.lua
local oldest = ARGV[1] == 'oldest' and number_in(ARGV[2], 0, 1e9)
if not (oldest or ARGV[1] == 'ids') then
  return redis.error_reply('ERR purge: ARGV is "ids" and ids, or "oldest" and a count')
end
local bad = wrong_type({KEYS[1], 'zset'})
if bad then return bad end
local ids = {}
if oldest then
  local popped = redis.call('ZPOPMIN', KEYS[1], math.floor(oldest))
  for i = 1, #popped, 2 do ids[#ids + 1] = popped[i] end
else
  for i = 2, #ARGV do
    if redis.call('ZREM', KEYS[1], ARGV[i]) == 1 then ids[#ids + 1] = ARGV[i] end
  end
end
for _, id in ipairs(ids) do redis.call('DEL', KEYS[2] .. id) end
return #ids
