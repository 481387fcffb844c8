-- A router replica announces itself and learns how many replicas are alive (by Redis time, so skewed
-- replica clocks agree). KEYS: 1 replica zset (member = replica id, score = expiry ms)
-- ARGV: 1 replica id, 2 ttl ms. Returns the number of live replicas, this one included.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('PEXPIRE', KEYS[1], ttl * 2)
return redis.call('ZCARD', KEYS[1])
