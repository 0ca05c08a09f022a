-- Provides now_ms(): Redis's clock (TIME) in epoch ms, so every worker and client shares
-- one clock; now_us() the same in microseconds (an integer below 2^53: exact in a double).
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function now_ms()
  return math.floor(now_us() / 1000)
end
