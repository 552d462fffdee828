-- The `done` hook the load scripts' wrk Lua files share (post.lua, get.lua): one
-- machine-readable line after wrk's own report, which scripts/load-common.sh reads.

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
