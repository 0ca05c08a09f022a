-- Provides now_ms(): Redis's clock (TIME) in epoch ms, so every worker and client shares
-- one clock.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
