-- Adds one instance's batch of usage deltas to an hour's totals: at most once, and never half.
--
-- KEYS[1]  the hour's totals: a hash, fields `<key name>:calls` and `<key name>:tenths`
-- KEYS[2]  its ledger: a hash, field `<instance id>` = the last batch seq applied, and
--          `<instance id>:skipped` = the fields that batch skipped (JSON array; absent if none)
-- ARGV[1]  the instance id (random, per process)
-- ARGV[2]  the batch's seq (increasing per instance; a batch is resent unchanged until answered)
-- ARGV[3]  when both keys expire (unix seconds)
-- ARGV[4..] field, increment, field, increment, ...
--
-- Returns {status, skipped field, ...}:
--   1   applied now, but the fields listed, which hold something else than a count (someone
--       else's value: never overwritten, never added to);
--   0   this batch was applied before (its answer was lost to a timeout): nothing is added again,
--       and the fields it skipped then are listed again;
--   -1  the totals' key holds something else than a hash: nothing written;
--   -2  the ledger holds something else than a hash, or this instance's entry in it is no seq
--       this instance could have written: nothing written.
-- Redis does not roll a script back when a command fails, so every input is checked before the
-- first write; the ledger is that first write, so that even a write failing past it (one the
-- checks cannot foresee) makes a resend add nothing, and such a field is listed as skipped.

-- Whether `v` is a count as HINCRBY writes it: a decimal integer 0..2^63-1, no sign, no padding.
local function count(v)
  if v == '0' then return true end
  if not string.match(v, '^[1-9][0-9]*$') then return false end
  return #v < 19 or (#v == 19 and v <= '9223372036854775807')
end
-- `a` < `b`, both counts.
local function less(a, b)
  return #a < #b or (#a == #b and a < b)
end
local function kind(key)
  return redis.call('TYPE', key)['ok']
end

local t = kind(KEYS[1])
if t ~= 'none' and t ~= 'hash' then return {-1} end
t = kind(KEYS[2])
if t ~= 'none' and t ~= 'hash' then return {-2} end
local me, seq = ARGV[1], ARGV[2]
local last = redis.call('HGET', KEYS[2], me)
if last then
  -- Seqs only grow and one batch is in flight at a time: a later seq is no seq of ours.
  if not count(last) or less(seq, last) then return {-2} end
  if last == seq then
    local out = {0}
    local listed = redis.call('HGET', KEYS[2], me .. ':skipped')
    if listed then
      local ok, fields = pcall(cjson.decode, listed)
      if ok and type(fields) == 'table' then
        for _, f in ipairs(fields) do
          if type(f) == 'string' then out[#out + 1] = f end
        end
      end
    end
    return out
  end
end

local skipped, apply = {}, {}
for i = 4, #ARGV, 2 do
  local v = redis.call('HGET', KEYS[1], ARGV[i])
  if v and not count(v) then
    skipped[#skipped + 1] = ARGV[i]
  else
    apply[#apply + 1] = i
  end
end
redis.call('HSET', KEYS[2], me, seq)
for _, i in ipairs(apply) do
  local r = redis.pcall('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1])
  if type(r) == 'table' and r.err then skipped[#skipped + 1] = ARGV[i] end
end
if #skipped > 0 then
  redis.call('HSET', KEYS[2], me .. ':skipped', cjson.encode(skipped))
else
  redis.call('HDEL', KEYS[2], me .. ':skipped')
end
redis.call('EXPIREAT', KEYS[1], ARGV[3])
redis.call('EXPIREAT', KEYS[2], ARGV[3])
local out = {1}
for _, f in ipairs(skipped) do out[#out + 1] = f end
return out
