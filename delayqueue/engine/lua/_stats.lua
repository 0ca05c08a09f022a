-- Provides count_stat(): the per-minute counters of a queue (dq:{Q}:stats:<minute>).
-- #include _bounds.lua
-- #include _types.lua

-- Adds `n` to counter `field` of stats hash `stats`, unless that key or field holds
-- something HINCRBY refuses (the counters are worth less than the call).
local function count_stat(stats, field, n, ttl)
  local t = key_type(stats)
  if (t == 'hash' and counter(redis.call('HGET', stats, field))) or t == 'none' then
    redis.call('HINCRBY', stats, field, n)
    redis.call('EXPIRE', stats, ttl)
  end
end
