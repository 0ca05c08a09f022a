-- Provides the bounds of what a script accepts and the parsers that check them: number_in,
-- counter, max_attempts. Times are epoch ms between year 1 and the end of year 9999 (what
-- Python's datetime can show); a visibility timeout is 1 ms to 10^12 ms; max attempts 1 to
-- 10^9; counters (tok, att, rp) integers of at most 15 digits, so Lua's doubles hold them
-- exactly and HINCRBY accepts them.
local MIN_TIME_MS = -62135596800000   -- 0001-01-01T00:00:00Z
local MAX_TIME_MS = 253402300799999   -- 9999-12-31T23:59:59.999Z
local MAX_VT_MS = 1e12
local MAX_MAX_ATTEMPTS = 1e9
local MAX_AHEAD_MS = 1000  -- claim's ahead ms (validators.MAX_DISPATCH_AHEAD)

-- `v` as a number when it is one within [lo, hi]; nil for nan, inf, text, false or nil.
local function number_in(v, lo, hi)
  local n = tonumber(v)
  if n and n == n and n >= lo and n <= hi then return n end
  return nil
end

-- A stored counter (tok, att, rp): 0 when missing, nil when HINCRBY would refuse it or it
-- is too large to be exact.
local function counter(v)
  if not v then return 0 end
  if #v < 16 and string.match(v, '^%-?%d+$') then return tonumber(v) end
  return nil
end

-- Stored max attempts: `default` when missing, nil when it is not an integer in bounds.
local function max_attempts(v, default)
  if not v then return default end
  local n = number_in(v, 1, MAX_MAX_ATTEMPTS)
  if n and n == math.floor(n) then return n end
  return nil
end
