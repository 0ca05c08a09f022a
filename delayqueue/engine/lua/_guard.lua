-- What every script keeps (docs/design.md, "Rules every script keeps"): Redis does not roll
-- a script back, so a script checks every field it reads before its first write, and
-- orders its writes so that an error part-way cannot lose a job (a job is added to the set
-- it goes to before it is removed from the one it leaves). The helpers here only read.
--
-- Bounds. Times are epoch ms between year 1 and the end of year 9999 (what Python's
-- datetime can show); a visibility timeout is 1 ms to 10^12 ms; max attempts 1 to 10^9;
-- counters (tok, att, rp) integers of at most 15 digits, so Lua's doubles hold them
-- exactly and HINCRBY accepts them; a history ('hist') longer than MAX_HIST_BYTES, or one
-- that is not a JSON list, starts afresh.
local MIN_TIME_MS = -62135596800000   -- 0001-01-01T00:00:00Z
local MAX_TIME_MS = 253402300799999   -- 9999-12-31T23:59:59.999Z
local MAX_VT_MS = 1e12
local MAX_MAX_ATTEMPTS = 1e9
local MAX_HIST_BYTES = 65536
local HIST_KEPT = 20

-- Redis's clock in ms.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

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

-- The type of key `k` ('none' when it does not exist).
local function key_type(k)
  return redis.call('TYPE', k).ok
end

-- An error reply when one of the keys (key, type, key, type, ...) exists with another
-- type than the one the script writes to it, else nil. A script calls it before its first
-- write, so a stray key fails the call instead of aborting it half-way.
local function wrong_type(list)
  for i = 1, #list, 2 do
    local t = key_type(list[i])
    if t ~= 'none' and t ~= list[i + 1] then
      return redis.error_reply('WRONGTYPE delayqueue: ' .. list[i] .. ' is a ' .. t ..
                               ', not a ' .. list[i + 1])
    end
  end
  return nil
end

-- Fields of hash `k` (HMGET), or nil when `k` exists but is not a hash.
local function hash_fields(k, ...)
  local f = redis.pcall('HMGET', k, ...)
  if f.err then return nil end
  return f
end

-- `s` when it is UTF-8, else `s` with each byte that is not part of a UTF-8 character
-- written as the 4 characters \xNN (cjson writes bytes as they are, and a history that is
-- not UTF-8 is no JSON for the admin to read).
local function utf8_text(s)
  if not string.find(s, '[\128-\255]') then return s end
  local out, i, n = {}, 1, #s
  while i <= n do
    local c = string.byte(s, i)
    local len = 0
    if c < 0x80 then len = 1
    elseif c >= 0xC2 and c <= 0xDF then len = 2
    elseif c >= 0xE0 and c <= 0xEF then len = 3
    elseif c >= 0xF0 and c <= 0xF4 then len = 4 end
    local ok = len > 0 and i + len - 1 <= n
    for j = i + 1, ok and i + len - 1 or 0 do
      local b = string.byte(s, j)
      if b < 0x80 or b > 0xBF then ok = false end
    end
    if ok and len >= 3 then  -- no overlong forms, surrogates or code points past U+10FFFF
      local b2 = string.byte(s, i + 1)
      if (c == 0xE0 and b2 < 0xA0) or (c == 0xED and b2 > 0x9F)
          or (c == 0xF0 and b2 < 0x90) or (c == 0xF4 and b2 > 0x8F) then ok = false end
    end
    if ok then
      out[#out + 1] = string.sub(s, i, i + len - 1)
      i = i + len
    else
      out[#out + 1] = string.format('\\x%02x', c)
      i = i + 1
    end
  end
  return table.concat(out)
end

-- The history `stored` with `entry` appended, as JSON (the last HIST_KEPT entries). Its
-- detail is made UTF-8; a stored history that is huge, not a JSON list, not UTF-8 or not
-- encodable again starts afresh.
local function history_with(stored, entry)
  entry.detail = utf8_text(entry.detail)
  local list = {}
  if stored and #stored <= MAX_HIST_BYTES and utf8_text(stored) == stored then
    local ok, decoded = pcall(cjson.decode, stored)
    if ok and type(decoded) == 'table' then
      for i = math.max(1, #decoded - HIST_KEPT + 2), #decoded do list[#list + 1] = decoded[i] end
    end
  end
  list[#list + 1] = entry
  local ok, encoded = pcall(cjson.encode, list)
  if ok then return encoded end
  return cjson.encode({entry})
end

-- Turns a job key that is not a hash (someone else's data) into a hash saying why, keeping
-- a string's value as 'raw'. Writes: call it only once the script decided to bury the job.
local function replace_foreign(job, why)
  local t = key_type(job)
  local raw = '(a Redis ' .. t .. ')'
  if t == 'string' then raw = redis.call('GET', job) end
  redis.call('DEL', job)
  redis.call('HSET', job, 'why', why, 'err', why, 'raw', raw)
end

-- Adds `n` to counter `field` of stats hash `stats`, unless that key or field holds
-- something HINCRBY refuses (the counters are worth less than the call).
local function count_stat(stats, field, n, ttl)
  local t = key_type(stats)
  if (t == 'hash' and counter(redis.call('HGET', stats, field))) or t == 'none' then
    redis.call('HINCRBY', stats, field, n)
    redis.call('EXPIRE', stats, ttl)
  end
end

-- `redis.call(cmd, key, ...list)` in slices, as unpack() of a long list overflows Lua's
-- stack. `width` is how many list items make one member (2 for score, member pairs).
local function chunked(cmd, key, list, width)
  local size = 500 * width
  for i = 1, #list, size do
    redis.call(cmd, key, unpack(list, i, math.min(i + size - 1, #list)))
  end
end
