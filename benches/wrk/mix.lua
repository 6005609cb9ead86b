-- wrk script of the load benchmark: spreads POSTs over the request bodies listed in the file
-- named by $SNOWGATE_BODIES (one "PATH<TAB>BODY" per line), picked at random (fixed seed), and
-- prints one machine-readable result line at the end.
--
-- The requests are built once at start, so the per-request cost inside wrk is a table lookup: the
-- load generator does the same small amount of work for every contestant.

local file = os.getenv("SNOWGATE_BODIES")
local requests = {}
local count = 0

-- Built in init(), once wrk has set its Host header (wrk.format copies it into each request).
function init(args)
  math.randomseed(1)
  local headers = { ["Content-Type"] = "application/json" }
  for line in io.lines(file) do
    local path, body = line:match("^([^\t]+)\t(.+)$")
    if path then
      requests[#requests + 1] = wrk.format("POST", path, headers, body)
    end
  end
  count = #requests
  assert(count > 0, "no request bodies in " .. tostring(file))
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
