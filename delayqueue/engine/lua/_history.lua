-- Provides history_with(): a job's history ('hist', a JSON list of what happened to it) with
-- one entry more, keeping the last HIST_KEPT (20). A stored history longer than
-- MAX_HIST_BYTES, or one that is not a JSON list, starts afresh.
-- #include _utf8.lua
local MAX_HIST_BYTES = 65536
local HIST_KEPT = 20

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
