-- Not a script of its own: the settlement steps admit.lua and settle.lua share, pasted by
-- `global_router/lua_script.py` where a script says `--#include settle_steps` (a Redis script cannot
-- `require`). They settle what a replica owes one tenant's limits: token reservations reconciled with
-- real usage, admissions made on the local fallback while Redis was unreachable, and finished
-- requests' concurrency leases.
-- Needs the locals `now` (Redis time, ms) and `period` (ms) declared before the include.
-- KEYS: 1 request TAT, 2 token TAT, 3 concurrency lease zset

-- move one GCRA TAT by `delta` units (negative refunds, never below now)
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

-- charge `requests` and `token_delta`, free the lease ids ARGV[first_lease..]
local function settle(rpm, tpm, requests, token_delta, first_lease)
  shift(KEYS[1], rpm, requests)
  shift(KEYS[2], tpm, token_delta)
  for i = first_lease, #ARGV do
    redis.call('ZREM', KEYS[3], ARGV[i])
  end
end
