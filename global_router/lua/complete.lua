-- Completion of an admitted request: reconcile the token reservation with real usage and free the
-- concurrency lease. KEYS: 1 token TAT, 2 concurrency lease zset
-- ARGV: 1 tpm limit, 2 token delta (used - reserved; negative refunds), 3 lease id ('' = none), 4 period ms
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local tpm, delta, period = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[4])
if tpm > 0 and delta ~= 0 then
  local iv = period / tpm
  local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
  local new_tat = nil
  if delta > 0 then
    new_tat = math.max(tat, now) + delta * iv
  elseif tat > now then
    new_tat = math.max(now, tat + delta * iv)
  end
  if new_tat ~= nil then
    redis.call('SET', KEYS[1], string.format('%.3f', new_tat), 'PX', math.ceil(new_tat - now) + 1000)
  end
end
if ARGV[3] ~= '' then
  redis.call('ZREM', KEYS[2], ARGV[3])
end
return 1
