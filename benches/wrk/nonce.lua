-- wrk script of the load benchmark's cache-size run: `platform.getTx` for one transaction with an
-- extra `nonce` member drawn at random from [0, $SNOWGATE_KEYS). A node ignores the unknown
-- member, but it is part of snowgate's cache key, so every nonce is its own cached entry with the
-- same answer: the run measures what a hit costs as a function of how many keys the cache holds.
-- The body is built per request, the same work whatever the number of keys.

local txid = assert(os.getenv("SNOWGATE_TXID"), "set SNOWGATE_TXID")
local keys = assert(tonumber(os.getenv("SNOWGATE_KEYS")), "set SNOWGATE_KEYS")
local path = os.getenv("SNOWGATE_PATH") or "/ext/bc/P"
local headers = { ["Content-Type"] = "application/json" }
local template = '{"jsonrpc":"2.0","id":1,"method":"platform.getTx","params":{"txID":"'
  .. txid .. '","nonce":%d}}'

function init(args)
  math.randomseed(1)
end

function request()
  return wrk.format("POST", path, headers, string.format(template, math.random(0, keys - 1)))
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "WRK_RESULT requests=%d duration_us=%d errors=%d status_errors=%d p50_us=%d p90_us=%d p99_us=%d mean_us=%.1f max_us=%d\n",
    summary.requests, summary.duration, e.connect + e.read + e.write + e.timeout, e.status,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.mean, latency.max))
end
