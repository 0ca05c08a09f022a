-- Provides utf8_text(): text made valid UTF-8, for what a script writes into JSON.

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
