-- Settle what a replica owes one tenant's limits, without admitting anything: token reservations
-- reconciled with real usage, admissions made on the local fallback while Redis was unreachable, and
-- finished requests' concurrency leases (settle_steps.lua). The same steps open admit.lua (piggybacked
-- settlement).
-- KEYS: 1 request TAT, 2 token TAT, 3 concurrency lease zset
-- ARGV: 1 rpm limit, 2 tpm limit, 3 period ms, 4 requests to charge, 5 token delta (negative
--       refunds), 6.. lease ids to free
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local period = tonumber(ARGV[3])

--#include settle_steps

settle(tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[4]), tonumber(ARGV[5]), 6)
return 1
