-- wrk script: platform.getHeight against a devnode's P-chain route.
--   wrk -t1 -c50 -d10s -s benches/wrk/getheight.lua http://127.0.0.1:PORT/ext/bc/P
-- No response() hook on purpose: it makes wrk parse every body in Lua and measure itself.
-- wrk prints "Non-2xx or 3xx responses: N" when any answer was not a success.
wrk.method = "POST"
wrk.body = '{"jsonrpc":"2.0","method":"platform.getHeight","params":{},"id":1}'
wrk.headers["Content-Type"] = "application/json"
