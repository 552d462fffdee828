#!/usr/bin/env bash
# Load test of `GET /healthcheck` on loopback: the server's floor (routing, HTTP, the
# answer "ok") without any symbolication. Starts the release build as scripts/load.sh
# does, with no sources, then runs
#   wrk -t2 -c32 -d10s -s benches/load/get.lua http://127.0.0.1:PORT/healthcheck
# RUNS times (default 5): each run's requests/s, the median, the server's peak RSS.
#
# Environment: RUNS (default 5), DURATION (default 10s), CONNECTIONS (default 32),
# THREADS (default 2), KEEP_TMP=1 to keep the temp dir. UPSTREAM_BIN (a build of upstream
# Symbolicator) runs the same on upstream too, in ROUNDS (default 3) alternating rounds,
# and compares (scripts/load-common.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

WORK="GET /healthcheck"
LUA=benches/load/get.lua

. scripts/load-common.sh

start_server ""
load_runs /healthcheck ""
