-- Atomic admission for one tenant: requests/min and tokens/min (GCRA) and concurrency (leases).
-- Nothing is committed unless every limit admits the request, so a refusal costs the tenant nothing.
-- It first settles what this replica owes the tenant from earlier requests (settle_steps.lua, as
-- settle.lua does), so a busy tenant's reconciliation rides on its next admission: one round trip
-- per request.
-- KEYS: 1 request TAT, 2 token TAT, 3 concurrency lease zset
-- ARGV: 1 rpm limit, 2 tpm limit, 3 concurrency limit (0 = unlimited each), 4 tokens to reserve,
--       5 lease id, 6 lease ttl ms, 7 period ms,
--       8 requests to charge, 9 token delta (negative refunds), 10.. lease ids to free (settlement)
-- Returns {allowed, reason (0 ok, 1 requests, 2 tokens, 3 concurrency),
--          req_remaining, req_reset_ms, tok_remaining, tok_reset_ms, retry_after_ms (-1 = never), in_use}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local period = tonumber(ARGV[7])
local rpm, tpm, conc = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local cost = tonumber(ARGV[4])

--#include settle_steps

settle(rpm, tpm, tonumber(ARGV[8] or '0'), tonumber(ARGV[9] or '0'), 10)

-- one GCRA limit: {ok, tat before, tat after, retry ms (-1 never)}
local function gcra(key, limit, units)
  local iv = period / limit
  local tat = tonumber(redis.call('GET', key) or '0')
  if tat < now then tat = now end
  local new_tat = tat + units * iv
  if units > limit then return {false, tat, new_tat, -1} end
  if new_tat - now > period then return {false, tat, new_tat, new_tat - now - period} end
  return {true, tat, new_tat, 0}
end

local function remaining(limit, tat)
  local iv = period / limit
  return math.max(0, math.floor((period - (tat - now)) / iv + 1e-9))
end

local allowed, reason, retry = true, 0, 0
local r, k = nil, nil
if rpm > 0 then
  r = gcra(KEYS[1], rpm, 1)
  if not r[1] then allowed, reason, retry = false, 1, r[4] end
end
if tpm > 0 then
  k = gcra(KEYS[2], tpm, cost)
  if not k[1] and allowed then allowed, reason, retry = false, 2, k[4] end
end
local in_use = 0
if conc > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  in_use = redis.call('ZCARD', KEYS[3])
  if in_use >= conc and allowed then
    allowed, reason, retry = false, 3, 1000
    local oldest = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
    if oldest[2] then retry = math.min(1000, tonumber(oldest[2]) - now) end
  end
end

local out = {allowed and 1 or 0, reason, -1, 0, -1, 0, 0, in_use}
if r then
  local tat = allowed and r[3] or r[2]
  out[3] = remaining(rpm, tat); out[4] = math.ceil(tat - now)
  if allowed then redis.call('SET', KEYS[1], string.format('%.3f', tat), 'PX', math.ceil(tat - now) + 1000) end
end
if k then
  local tat = allowed and k[3] or k[2]
  out[5] = remaining(tpm, tat); out[6] = math.ceil(tat - now)
  if allowed then redis.call('SET', KEYS[2], string.format('%.3f', tat), 'PX', math.ceil(tat - now) + 1000) end
end
if allowed and conc > 0 then
  local ttl = tonumber(ARGV[6])
  redis.call('ZADD', KEYS[3], now + ttl, ARGV[5])
  redis.call('PEXPIRE', KEYS[3], ttl * 2)
  out[8] = in_use + 1
end
if retry < 0 then out[7] = -1 else out[7] = math.ceil(retry) end
return out
