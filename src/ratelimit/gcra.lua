-- snowgate's global quota: GCRA (the generic cell rate algorithm) over one client's key, atomic.
--
-- The key holds the client's TAT (theoretical arrival time) in microseconds of Redis's own clock,
-- so the instances' clocks never matter. Units are tenths of a cost unit, as in the local limiter.
-- One key per call and no other key touched: safe on a Redis Cluster.
--
-- KEYS[1]  the client's key: {key_prefix}q:ip:<address>, {key_prefix}q:key:<sha-256 prefix>, ...
-- ARGV[1]  emission interval: microseconds per unit (may be fractional)
-- ARGV[2]  burst: units the client may spend at once
-- ARGV[3]  units given back first (an instance's unused lease): the TAT moves back, never below now
-- ARGV[4]  units wanted
-- ARGV[5]  fewest units worth taking: when fewer are available, none are taken
--
-- Answers {granted, wait}: the units taken (0 or between ARGV[5] and ARGV[4]) and, when none were
-- but some were wanted, the microseconds until ARGV[5] units will be available (the Retry-After).
-- The key expires when its TAT has passed: an idle client is then the same as a new one.
-- `src/ratelimit/lease.rs` (`model`) is this arithmetic in Rust, property-tested.
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local interval = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2]) * interval
local give = tonumber(ARGV[3])
local want = tonumber(ARGV[4])
local least = tonumber(ARGV[5])

-- Everything below is relative to now: ahead = TAT - now, exact in a double (both are whole
-- microseconds), where TAT and now themselves (about 1.7e15) would lose the fractions.
-- A value that is not ours (another type, not a number, beyond any TAT this script writes) is
-- read as a new client or a spent burst, and overwritten below. Only its first 32 bytes are read
-- (a TAT has 16 digits): a huge string planted under the key would otherwise be copied into the
-- script, stalling Redis for every instance.
local raw = redis.pcall('GETRANGE', KEYS[1], 0, 31)
local stored = nil
if type(raw) == 'string' then
  stored = tonumber(raw)
end
local ahead = 0
if stored and stored > now then
  ahead = math.min(stored - now, math.floor(tolerance + 0.5))
end
if give > 0 then
  ahead = math.max(math.floor(ahead - give * interval + 0.5), 0)
end

-- Units that fit before the TAT passes now + tolerance (a hair of slack against rounding).
local room = math.floor((tolerance - ahead) / interval + 1e-6)
local granted = math.min(want, room)
local wait = 0
if granted <= 0 or granted < least then
  granted = 0
  if least > 0 then
    wait = math.max(math.ceil(ahead + least * interval - tolerance), 1)
  end
else
  ahead = math.floor(ahead + granted * interval + 0.5)
end

if ahead > 0 then
  redis.call('SET', KEYS[1], string.format('%.0f', now + ahead), 'PX', math.ceil(ahead / 1000) + 1)
else
  redis.call('DEL', KEYS[1])
end
return {granted, wait}
