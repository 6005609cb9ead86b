-- wrk script of the load benchmark: spreads POSTs over the request bodies listed in the file
-- named by $SNOWGATE_BODIES (one "PATH<TAB>BODY" per line), picked at random (fixed seed), and
-- prints one machine-readable result line at the end.
--
-- The requests are built once at start, so the per-request cost inside wrk is a table lookup: the
-- load generator does the same small amount of work for every contestant.
--
-- With $SNOWGATE_CLIENTS = N, 16,384 requests are built instead, each a random body from one of N
-- addresses in X-Forwarded-For (10.x.y.z): many clients behind a trusted proxy (the fleet
-- section's global quotas).

local file = os.getenv("SNOWGATE_BODIES")
local clients = tonumber(os.getenv("SNOWGATE_CLIENTS") or "")
local requests = {}
local count = 0

-- Built in init(), once wrk has set its Host header (wrk.format copies it into each request).
function init(args)
  math.randomseed(1)
  local bodies = {}
  for line in io.lines(file) do
    local path, body = line:match("^([^\t]+)\t(.+)$")
    if path then
      bodies[#bodies + 1] = { path, body }
    end
  end
  assert(#bodies > 0, "no request bodies in " .. tostring(file))
  if clients then
    for i = 1, 16384 do
      local b = bodies[math.random(#bodies)]
      local c = math.random(clients) - 1
      local ip = string.format("10.%d.%d.%d", math.floor(c / 65536) % 256, math.floor(c / 256) % 256, c % 256)
      requests[i] = wrk.format("POST", b[1], { ["Content-Type"] = "application/json", ["X-Forwarded-For"] = ip }, b[2])
    end
  else
    local headers = { ["Content-Type"] = "application/json" }
    for _, b in ipairs(bodies) do
      requests[#requests + 1] = wrk.format("POST", b[1], headers, b[2])
    end
  end
  count = #requests
end

function request()
  return requests[math.random(count)]
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "WRK_RESULT requests=%d duration_us=%d errors=%d status_errors=%d p50_us=%d p90_us=%d p99_us=%d mean_us=%.1f max_us=%d\n",
    summary.requests, summary.duration, e.connect + e.read + e.write + e.timeout, e.status,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.mean, latency.max))
end
