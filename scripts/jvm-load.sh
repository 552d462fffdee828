#!/usr/bin/env bash
# Load test of warm `POST /symbolicate-jvm` on loopback.
#
# Builds the release binary, generates an R8 mapping with scripts/gen-proguard-mapping.py
# (MAPPING_MB megabytes, seed 1) and lays it out in the unified layout of a temp dir
# (`<uuid[0:2]>/<uuid[2:]>/proguard`), fills benches/load/jvm-body.json with that
# directory, the mapping's uuid and a 30-frame obfuscated stack trace taken from the
# mapping, starts `omnisym run` on 127.0.0.1 (kernel-chosen free port) with its cache in
# the temp dir, sends the body once (cold) and checks that every frame comes back
# remapped, then runs
#   wrk -t2 -c32 -d10s -s benches/load/post.lua http://127.0.0.1:PORT/symbolicate-jvm
# RUNS times (default 5), printing each run's requests/s and the median, and the
# server's peak RSS (VmHWM). The server is stopped and the temp dir removed on exit.
#
# Environment: RUNS (default 5), DURATION (wrk -d, default 10s), CONNECTIONS (wrk -c,
# default 32), THREADS (wrk -t, default 2), MAPPING_MB (default 5), FRAMES (default 30),
# KEEP_TMP=1 to keep the temp dir, CARGO_TARGET_DIR as cargo reads it.
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS="${RUNS:-5}"
DURATION="${DURATION:-10s}"
CONNECTIONS="${CONNECTIONS:-32}"
THREADS="${THREADS:-2}"
MAPPING_MB="${MAPPING_MB:-5}"
FRAMES="${FRAMES:-30}"
BODY_TEMPLATE=benches/load/jvm-body.json
LUA=benches/load/post.lua
# Any fixed uuid does; fixed so the cache key is the same from run to run.
UUID=3c5e7a9b-1d2f-4a6c-8e0b-2d4f6a8c0e13

die() {
    echo "jvm-load.sh: $*" >&2
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

cargo build --release
BIN="${CARGO_TARGET_DIR:-target}/release/omnisym"
[ -x "$BIN" ] || die "$BIN was not built"

TMP="$(mktemp -d "${TMPDIR:-/tmp}/omnisym-jvm-load.XXXXXX")"
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

SYMBOLS="$TMP/symbols"
HEX="${UUID//-/}"
MAPPING="$SYMBOLS/${HEX:0:2}/${HEX:2}/proguard"
mkdir -p "$(dirname "$MAPPING")"
python3 scripts/gen-proguard-mapping.py "$MAPPING" --size-mb "$MAPPING_MB" --seed 1
echo "mapping: $(wc -c <"$MAPPING") bytes at ${MAPPING#"$SYMBOLS/"}"

BODY="$TMP/body.json"
python3 - "$BODY_TEMPLATE" "$BODY" "$SYMBOLS" "$UUID" "$MAPPING" "$FRAMES" <<'EOF'
import json, re, sys
template, out, symbols, uuid, mapping, count = sys.argv[1:]
count = int(count)
body = json.load(open(template))
source, module = body["sources"][0], body["modules"][0]
stacktrace = body["stacktraces"][0]
assert source["path"] == "@SYMBOLS@" and module["uuid"] == "@UUID@" \
    and stacktrace["frames"] == "@FRAMES@", "body template lacks a placeholder"
source["path"], module["uuid"] = symbols, uuid

# The first line of evenly spread method ranges of ordinary classes: real frames that
# remap, some through inline chains. Outlines, synthesized lambda classes and methods
# are left out: they legitimately vanish from a remapped trace, which would blur the
# check below.
CLASS = re.compile(r"^(\S+) -> (\S+):$")
RANGE = re.compile(r"^    (\d+):\d+:\S+ ([^\s(]+)\(.*\):\d+(?::\d+)? -> (\S+)$")
ranges, obf_class, skip, seen = [], None, False, set()
for line in open(mapping, encoding="utf-8"):
    line = line.rstrip("\n")
    m = CLASS.match(line)
    if m:
        original, obf_class = m.groups()
        # Kept classes (not renamed) would pass the check without being remapped.
        skip = "$$External" in original or "$Outline" in original or original == obf_class
        continue
    m = RANGE.match(line)
    if not m or skip or obf_class is None:
        continue
    start, method, obf_method = m.groups()
    if "$r8$lambda$" in method:
        continue
    key = (obf_class, obf_method, int(start))
    if key not in seen:
        seen.add(key)
        ranges.append(key)
assert len(ranges) >= count, f"only {len(ranges)} method ranges"
step = len(ranges) // count
picked = ranges[::step][:count]
# Outermost frame first, as the SDKs send it (the request's default frame order).
stacktrace["frames"] = [
    {"function": method, "module": cls, "lineno": line, "index": i, "platform": "java"}
    for i, (cls, method, line) in enumerate(picked)
]
json.dump(body, open(out, "w"), indent=1)
EOF

cat >"$TMP/config.yml" <<EOF
bind: 127.0.0.1:0
cache_dir: $TMP/cache
logging:
  level: warn
  format: simplified
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

# Cold request: builds the ProGuard cache, and proves the body is what we think it is.
COLD="$TMP/cold.json"
start_ns=$(date +%s%N)
curl -fsS --max-time 120 -H 'Content-Type: application/json' --data-binary "@$BODY" \
    "$URL/symbolicate-jvm" -o "$COLD"
end_ns=$(date +%s%N)
echo "cold request: $(( (end_ns - start_ns) / 1000000 )) ms, $(wc -c <"$COLD") response bytes"
python3 - "$BODY" "$COLD" <<'EOF'
import json, sys
request = json.load(open(sys.argv[1]))
response = json.load(open(sys.argv[2]))
assert response.get("status") == "completed", f"status {response.get('status')!r}"
assert response.get("errors") == [], f"errors {response.get('errors')}"
sent = request["stacktraces"][0]["frames"]
frames = response["stacktraces"][0]["frames"]
# Each input frame must come back as at least one frame of a deobfuscated class.
remapped = {f["index"] for f in frames
            if f["module"] != sent[f["index"]]["module"] and f.get("filename")}
print(f"cold check: {len(remapped)}/{len(sent)} input frames remapped, "
      f"{len(frames)} output frames (inlined frames expanded)")
if len(remapped) != len(sent):
    missing = [f for f in sent if f["index"] not in remapped]
    sys.exit(f"jvm-load.sh: input frames not remapped: {missing}")
EOF

echo "load: wrk -t$THREADS -c$CONNECTIONS -d$DURATION --latency, $RUNS runs"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
RPS=()
for run in $(seq "$RUNS"); do
    out="$TMP/wrk-$run.txt"
    OMNISYM_BODY="$BODY" wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency \
        -s "$LUA" "$URL/symbolicate-jvm" >"$out"
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
