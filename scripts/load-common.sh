#!/usr/bin/env bash
# What the load scripts share: tools, the release build, a temp dir that is removed on
# exit, starting the server on a free loopback port, one cold request, and the wrk runs
# with their median requests/s and the server's peak RSS. Sourced, not run. RUNS (5),
# DURATION (10s), CONNECTIONS (32), THREADS (2) and LUA come from the environment.

RUNS="${RUNS:-5}"
DURATION="${DURATION:-10s}"
CONNECTIONS="${CONNECTIONS:-32}"
THREADS="${THREADS:-2}"
LUA="${LUA:-benches/load/post.lua}"

die() {
    echo "$(basename "$0"): $*" >&2
    exit 1
}

as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null; then
        sudo "$@"
    else
        die "need root to run: $*"
    fi
}

# Installs Debian packages that are missing; `apt-get update` only when the package
# lists do not know them yet.
ensure_pkg() {
    local cmd=$1 pkg=$2
    command -v "$cmd" >/dev/null && return 0
    echo "installing $pkg" >&2
    if ! as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$pkg" >/dev/null; then
        as_root apt-get update -qq
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$pkg" >/dev/null
    fi
    command -v "$cmd" >/dev/null || die "$pkg did not provide $cmd"
}

ensure_pkg wrk wrk
ensure_pkg curl curl
ensure_pkg python3 python3

# BIN names another build to load (say, an older one, to compare); else this tree's.
if [ -z "${BIN:-}" ]; then
    cargo build --release
    BIN="${CARGO_TARGET_DIR:-target}/release/omnisym"
fi
[ -x "$BIN" ] || die "$BIN was not built"

TMP="$(mktemp -d "${TMPDIR:-/tmp}/omnisym-load.XXXXXX")"
SERVER_PID=""
cleanup() {
    if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -TERM "$SERVER_PID" 2>/dev/null || true
        for _ in $(seq 50); do
            kill -0 "$SERVER_PID" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    if [ "${KEEP_TMP:-0}" = 1 ]; then
        echo "kept $TMP" >&2
    else
        rm -rf "$TMP"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM


# start_server EXTRA_YAML: the server on a free port, with its cache in $TMP; sets URL.
start_server() {
cat >"$TMP/config.yml" <<EOF
bind: 127.0.0.1:0
cache_dir: $TMP/cache
logging:
  level: ${LOG_LEVEL:-warn}
  format: simplified
$1
EOF

"$BIN" run -c "$TMP/config.yml" 2>"$TMP/server.log" &
SERVER_PID=$!

# The server prints the address it bound (the port was 0: a free one, chosen by the kernel).
URL=""
for _ in $(seq 300); do
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$TMP/server.log" >&2; die "server exited"; }
    URL="$(sed -n 's/^omnisym listening on \(http:[^ ]*\).*/\1/p' "$TMP/server.log" | head -n1)"
    [ -n "$URL" ] && curl -fsS --max-time 2 "$URL/healthcheck" >/dev/null 2>&1 && break
    URL=""
    sleep 0.1
done
[ -n "$URL" ] || { cat "$TMP/server.log" >&2; die "server did not become healthy within 30s"; }
echo "server pid $SERVER_PID at $URL"

}

# cold_request ENDPOINT BODY OUT: the first request, which builds the caches.
cold_request() {
    local endpoint=$1 body=$2 out=$3
    start_ns=$(date +%s%N)
    curl -fsS --max-time 120 -H 'Content-Type: application/json' --data-binary "@$body" \
        "$URL$endpoint" -o "$out"
    end_ns=$(date +%s%N)
    echo "cold request: $(( (end_ns - start_ns) / 1000000 )) ms, $(wc -c <"$out") response bytes"
}

# load_runs ENDPOINT BODY: RUNS wrk runs, then the median and the server's peak RSS.
load_runs() {
    local endpoint=$1 BODY=$2
echo "load: wrk -t$THREADS -c$CONNECTIONS -d$DURATION --latency, $RUNS runs"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
RPS=()
for run in $(seq "$RUNS"); do
    out="$TMP/wrk-$run.txt"
    OMNISYM_BODY="$BODY" wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency \
        -s "$LUA" "$URL$endpoint" >"$out"
    summary="$(grep '^LOADSUMMARY' "$out")" || { cat "$out"; die "wrk printed no summary"; }
    rps="$(sed -n 's/.* rps=\([0-9.]*\).*/\1/p' <<<"$summary")"
    non2xx="$(sed -n 's/.* non2xx=\([0-9]*\).*/\1/p' <<<"$summary")"
    RPS+=("$rps")
    echo "--- run $run/$RUNS: $rps requests/s"
    grep -v '^LOADSUMMARY' "$out" | sed 's/^/    /'
    echo "    ${summary#LOADSUMMARY }"
    [ "$non2xx" = 0 ] || echo "    WARNING: $non2xx responses were not 2xx" >&2
done
echo "load average after:  $(cut -d' ' -f1-3 /proc/loadavg)"

MEDIAN="$(printf '%s\n' "${RPS[@]}" | sort -g | awk '{v[NR]=$1} END {
    if (NR % 2) print v[(NR+1)/2]; else printf "%.1f\n", (v[NR/2]+v[NR/2+1])/2 }')"
HWM_KB="$(awk '/^VmHWM:/ {print $2}' "/proc/$SERVER_PID/status")"
RSS_KB="$(awk '/^VmRSS:/ {print $2}' "/proc/$SERVER_PID/status")"
echo
echo "requests/s per run: ${RPS[*]}"
echo "median requests/s:  $MEDIAN"
awk -v h="$HWM_KB" -v r="$RSS_KB" 'BEGIN {
    printf "server peak RSS (VmHWM): %.1f MiB (VmRSS now %.1f MiB)\n", h/1024, r/1024 }'
if grep -qv '^omnisym listening on' "$TMP/server.log"; then
    echo "server log (warnings and errors, last 20 lines):"
    grep -v '^omnisym listening on' "$TMP/server.log" | tail -n 20 | sed 's/^/    /'
fi
}
