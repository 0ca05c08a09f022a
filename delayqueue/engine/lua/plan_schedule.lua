-- plan_schedule: (none | planned | paused | changed) -> planned. Writes a schedule's record
-- and the job of its next occurrence; the occurrence it planned before, when it is another
-- and was never claimed, is removed (a changed rule or spec re-plans without a second run
-- of the occurrence that is running now: that one has a hash and stays). Only when the
-- record still plans the occurrence the caller read (ARGV[7]): a planner whose read is older
-- than another worker's plan or step would otherwise put the schedule back on an occurrence
-- that has run, and drop the one that worker planned after it.
-- KEYS[1] schedules zset                dq:{Q}:schedules (name -> next occurrence ms)
-- KEYS[2] the schedule's hash           dq:{Q}:schedule:<name>
-- KEYS[3] scheduled zset                dq:{Q}:scheduled
-- KEYS[4] specs bucket prefix           dq:{Q}:specs:
-- KEYS[5] job hash prefix               dq:{Q}:job:
-- ARGV[1] the schedule's name
-- ARGV[2] next occurrence ms
-- ARGV[3] its job id
-- ARGV[4] the packed spec of every occurrence
-- ARGV[5] wake channel
-- ARGV[6] wake horizon ms
-- ARGV[7] the job id of the next occurrence the caller read ("" for none: no record, or paused;
--         bytes that are not UTF-8 as \xNN, as the caller reads them)
-- ARGV[8..] the record's fields, name then value (rule, timezone, fingerprint, ... and 'lim',
--         the occurrences' limits and expiry, "" for none: _occurrence.lua)
-- Returns {"planned", the occurrence it replaced or ""}, or {"moved", the job id the record
-- plans now}: it was planned or moved on since the caller read it, and nothing is written.
-- #include _now.lua
-- #include _types.lua
-- #include _bounds.lua
-- #include _occurrence.lua
-- #include _utf8.lua
local bad = wrong_type({KEYS[1], 'zset', KEYS[2], 'hash', KEYS[3], 'zset'})
if bad then return bad end
local due = number_in(ARGV[2], MIN_TIME_MS, MAX_TIME_MS)
if not due or not is_spec(ARGV[4]) or (#ARGV - 7) % 2 ~= 0 then
  return redis.error_reply('ERR plan_schedule: a bad due time, spec or field list')
end
local old = redis.call('HGET', KEYS[2], 'job')
if utf8_text(old or '') ~= ARGV[7] then return {'moved', utf8_text(old or '')} end
local replaced = ''
if old and old ~= ARGV[3] and drop_occurrence(KEYS[3], KEYS[4], KEYS[5], old) then
  replaced = old
end
if old == ARGV[3] and not was_claimed(KEYS[5], old) then
  -- The same occurrence, planned again (a changed spec or limits at the same instant): what
  -- it was goes, and write_occurrence below writes it anew.
  redis.pcall('HDEL', spec_bucket(KEYS[4], old), old)
  redis.call('DEL', KEYS[5] .. old)
end
local fields = {'next', due, 'job', ARGV[3], 'spec', ARGV[4], 'name', ARGV[1]}
local limits = ''
for i = 8, #ARGV do
  fields[#fields + 1] = ARGV[i]
  if i % 2 == 1 and ARGV[i - 1] == 'lim' then limits = ARGV[i] end
end
redis.call('HSET', KEYS[2], unpack(fields))
redis.call('HDEL', KEYS[2], 'paused')
write_occurrence(KEYS[3], KEYS[4], KEYS[5], ARGV[3], ARGV[4], due, ARGV[5], now_ms(),
                 tonumber(ARGV[6]) or 0, limits)
redis.call('ZADD', KEYS[1], due, ARGV[1])
return {'planned', replaced}
