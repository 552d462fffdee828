-- wrk script: POST the same JSON body on every request.
-- The body is read once from the file named by $OMNISYM_BODY (scripts/load.sh sets it to
-- symbolicate-body.json with the symbols directory filled in, scripts/jvm-load.sh to
-- jvm-body.json with the mapping's directory, uuid and frames filled in).

local path = os.getenv("OMNISYM_BODY")
if path == nil or path == "" then
  error("set OMNISYM_BODY to the request body file")
end
local file = assert(io.open(path, "rb"))
local body = file:read("*a")
file:close()

wrk.method = "POST"
wrk.body = body
wrk.headers["Content-Type"] = "application/json"

-- One machine-readable line after wrk's own report, for scripts/load.sh and jvm-load.sh.
done = function(summary, latency, requests)
  local secs = summary.duration / 1e6
  local errors = summary.errors
  io.write(string.format(
    "LOADSUMMARY rps=%.1f requests=%d secs=%.2f non2xx=%d connect=%d read=%d write=%d timeout=%d p50_ms=%.2f p90_ms=%.2f p99_ms=%.2f max_ms=%.2f\n",
    summary.requests / secs, summary.requests, secs, errors.status,
    errors.connect, errors.read, errors.write, errors.timeout,
    latency:percentile(50) / 1000, latency:percentile(90) / 1000,
    latency:percentile(99) / 1000, latency.max / 1000))
end
