-- Settle what a replica owes one tenant's limits, without admitting anything: token reservations
-- reconciled with real usage, admissions made on the local fallback while Redis was unreachable, and
-- finished requests' concurrency leases. The same steps open admit.lua (piggybacked settlement).
-- KEYS: 1 request TAT, 2 token TAT, 3 concurrency lease zset
-- ARGV: 1 rpm limit, 2 tpm limit, 3 period ms, 4 requests to charge, 5 token delta (negative
--       refunds), 6.. lease ids to free
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local period = tonumber(ARGV[3])

local function shift(key, limit, delta)
  if limit <= 0 or delta == 0 then return end
  local iv = period / limit
  local tat = tonumber(redis.call('GET', key) or '0')
  local new_tat = nil
  if delta > 0 then
    new_tat = math.max(tat, now) + delta * iv
  elseif tat > now then
    new_tat = math.max(now, tat + delta * iv)
  end
  if new_tat ~= nil then
    redis.call('SET', key, string.format('%.3f', new_tat), 'PX', math.ceil(new_tat - now) + 1000)
  end
end

shift(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[4]))
shift(KEYS[2], tonumber(ARGV[2]), tonumber(ARGV[5]))
for i = 6, #ARGV do
  redis.call('ZREM', KEYS[3], ARGV[i])
end
return 1
