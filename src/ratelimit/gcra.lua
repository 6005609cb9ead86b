-- snowgate's global quota: GCRA (the generic cell rate algorithm) over one client's key, atomic,
-- with the units instances hold on lease counted apart so that none of the client's budget is
-- ever out of reach.
--
-- The key holds "<TAT> <OUT>": the client's TAT (theoretical arrival time) in microseconds of
-- Redis's own clock, which counts what it spent and what instances took on lease, and OUT, the
-- units out on lease (held by instances, unspent as far as Redis knows). The instances' clocks never matter.
-- Units are tenths of a cost unit, as in the local limiter. One key per call and no other key
-- touched: safe on a Redis Cluster.
--
-- KEYS[1]  the client's key: {key_prefix}q:ip:<address>, {key_prefix}q:key:<sha-256 prefix>, ...
-- ARGV[1]  emission interval: microseconds per unit (may be fractional)
-- ARGV[2]  burst: units the client may spend at once
-- ARGV[3]  give: leased units given back unspent (the TAT moves back for those still out)
-- ARGV[4]  spent: leased units spent since the instance last called (they leave OUT; beyond OUT,
--          they had also been granted to another call meanwhile, and are charged now)
-- ARGV[5]  force: units charged whatever the room (the TAT may pass the burst by up to seven more)
-- ARGV[6]  need: units a call needs now, granted whole or not at all (from the room, then from
--          OUT: units out on lease are the client's budget, and the client is never refused while
--          some remain)
-- ARGV[7]  lease: units wanted on lease on top, granted only from what the client has beyond
--          half its burst, with at most half its burst out (a client near its budget is decided
--          here call by call)
-- ARGV[8]  how long a key holding units out on lease outlives this call, in milliseconds
--
-- Answers {granted, leased, wait, remaining}: the units granted to the call (0 or ARGV[6]), on
-- lease, the microseconds until the call would be granted when it was not (the Retry-After),
-- and the client's budget left (its room, OUT included; negative while it is in debt), for the
-- RateLimit headers and the instances' own refusals.
-- The key expires when its TAT has passed and nothing is out on lease: an idle client is then the
-- same as a new one.
-- `src/ratelimit/lease.rs` (`model`) is this arithmetic in Rust, property-tested.
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local tolerance = burst * interval
-- How far ahead a TAT may go: a client may owe up to seven bursts past its budget (owed calls
-- charged whatever the room, units spent twice), repaid by waiting (`DEBT_LIMIT` in lease.rs).
local ceiling = math.floor(8 * tolerance + 0.5)
local give = tonumber(ARGV[3])
local spent = tonumber(ARGV[4])
local force = tonumber(ARGV[5])
local need = tonumber(ARGV[6])
local lease = tonumber(ARGV[7])

-- Everything below is relative to now: ahead = TAT - now, exact in a double (both are whole
-- microseconds), where TAT and now themselves (about 1.7e15) would lose the fractions.
-- A value that is not ours (another type, not numbers, beyond any TAT this script writes) is read
-- as a new client or a spent burst, and overwritten below. Only its first 40 bytes are read (a TAT
-- has 16 digits): a huge string planted under the key would otherwise be copied into the script,
-- stalling Redis for every instance. A bare TAT (an older snowgate) is read with nothing out.
local raw = redis.pcall('GETRANGE', KEYS[1], 0, 39)
local stored, out = nil, 0
if type(raw) == 'string' then
  local t, o = string.match(raw, '^(%d+) (%d+)$')
  if t then
    stored, out = tonumber(t), tonumber(o)
  else
    stored = tonumber(raw)
  end
end
out = math.min(out or 0, burst)
local ahead = 0
if stored and stored > now then
  ahead = math.min(stored - now, ceiling)
end
local function room_of(a)
  return math.floor((tolerance - a) / interval + 1e-6)
end

-- Spent leases leave OUT (already charged); beyond it, they had also been granted to a call
-- meanwhile: spent twice, charged now, with the forced units.
local covered = math.min(spent, out)
out = out - covered
local twice = spent - covered
-- Returned leases still out move the TAT back.
local back = math.min(give, out)
out = out - back
ahead = math.max(math.floor(ahead - back * interval + 0.5), 0)
if force + twice > 0 then
  ahead = math.min(math.floor(ahead + (force + twice) * interval + 0.5), ceiling)
end

local granted, leased, wait = 0, 0, 0
if need > 0 then
  local room = room_of(ahead)
  if room >= need then
    granted = need
    ahead = math.floor(ahead + need * interval + 0.5)
  elseif math.max(room, 0) + out >= need then
    -- The rest from the units out on lease: already charged.
    granted = need
    ahead = math.floor(ahead + math.max(room, 0) * interval + 0.5)
    out = out - (need - math.max(room, 0))
  else
    wait = math.max(math.ceil(ahead + (need - out) * interval - tolerance), 1)
  end
end
if lease > 0 and (need == 0 or granted > 0) then
  -- From what the client has beyond half its burst, and never more than half its burst out.
  local half = math.floor(burst / 2)
  local spare = math.min(room_of(ahead) - half, half - out)
  leased = math.max(math.min(lease, spare), 0)
  if leased > 0 then
    ahead = math.floor(ahead + leased * interval + 0.5)
    out = out + leased
  end
end
local remaining = math.min(room_of(ahead) + out, burst)

if ahead > 0 or out > 0 then
  -- Kept while its TAT is ahead; with units out on lease, at least ARGV[8] ms (a key gone before
  -- its holders report would charge what they spent a second time).
  local ttl = math.ceil(ahead / 1000) + 1
  if out > 0 then
    ttl = math.max(ttl, tonumber(ARGV[8]))
  end
  redis.call('SET', KEYS[1], string.format('%.0f %d', now + ahead, out), 'PX', ttl)
else
  redis.call('DEL', KEYS[1])
end
return {granted, leased, wait, remaining}
