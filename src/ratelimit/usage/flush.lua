-- Adds one instance's batch of usage deltas to an hour's totals, at most once.
--
-- KEYS[1]  the hour's totals: a hash, field `<key name>:calls` and `<key name>:tenths`
-- KEYS[2]  the batches applied to it: a hash, field `<instance id>` = the last batch seq applied
-- ARGV[1]  the instance id (random, per process)
-- ARGV[2]  the batch's seq (increasing per instance; a batch is resent unchanged until applied)
-- ARGV[3]  when both keys expire (unix seconds)
-- ARGV[4..] field, increment, field, increment, ...
--
-- Returns 1 when applied, 0 when this batch (or a later one) was applied already: an answer lost
-- to a timeout makes the instance send it again, and the second send changes nothing.
local last = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
local seq = tonumber(ARGV[2])
if seq <= last then
  return 0
end
for i = 4, #ARGV, 2 do
  redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1])
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('EXPIREAT', KEYS[1], ARGV[3])
redis.call('EXPIREAT', KEYS[2], ARGV[3])
return 1
