-- Extend this replica's live concurrency leases (only those still present: XX), by Redis time so
-- replicas with skewed clocks agree. KEYS[i]: lease zset, ARGV[i]: lease id, ARGV[#KEYS+1]: ttl ms
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local ttl = tonumber(ARGV[#KEYS + 1])
local n = 0
for i, key in ipairs(KEYS) do
  n = n + redis.call('ZADD', key, 'XX', 'CH', now + ttl, ARGV[i])
  redis.call('PEXPIRE', key, ttl * 2)
end
return n
