-- Provides chunked(): one command over a long list of members, in slices.

-- `redis.call(cmd, key, ...list)` in slices, as unpack() of a long list overflows Lua's
-- stack. `width` is how many list items make one member (2 for score, member pairs).
local function chunked(cmd, key, list, width)
  local size = 500 * width
  for i = 1, #list, size do
    redis.call(cmd, key, unpack(list, i, math.min(i + size - 1, #list)))
  end
end
