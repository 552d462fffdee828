#!/usr/bin/env bash
# Load test of warm `POST /symbolicate` on loopback.
#
# Builds the release binary, lays the native fixtures out as a `native`-layout symbol
# directory in a temp dir, starts `omnisym run` on 127.0.0.1 (kernel-chosen free port)
# with its cache in the temp dir, sends benches/load/symbolicate-body.json once (cold)
# and checks that every frame comes back symbolicated, then runs
#   wrk -t2 -c32 -d10s -s benches/load/post.lua http://127.0.0.1:PORT/symbolicate
# RUNS times (default 5), printing each run's requests/s and the median, and the
# server's peak RSS (VmHWM). The server is stopped and the temp dir removed on exit.
#
# Environment: RUNS (default 5), DURATION (wrk -d, default 10s), CONNECTIONS (wrk -c,
# default 32), THREADS (wrk -t, default 2), KEEP_TMP=1 to keep the temp dir.
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS="${RUNS:-5}"
DURATION="${DURATION:-10s}"
CONNECTIONS="${CONNECTIONS:-32}"
THREADS="${THREADS:-2}"
BODY_TEMPLATE=benches/load/symbolicate-body.json
LUA=benches/load/post.lua
MANIFEST=fixtures/native/manifest.json

die() {
    echo "load.sh: $*" >&2
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
BIN=target/release/omnisym
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

# Symbols in the native layout (src/sources/paths.rs):
#   ELF debug file: <code_id[0:2]>/<code_id[2:]>.debug
#   PDB:            <debug_file>/<BREAKPADID>/<debug_file>   (symstore style)
SYMBOLS="$TMP/symbols"
python3 - "$MANIFEST" "$SYMBOLS" <<'EOF'
import json, os, shutil, sys
manifest_path, root = sys.argv[1], sys.argv[2]
base = os.path.dirname(manifest_path)
objects = json.load(open(manifest_path))["objects"]
elf, pe = objects["elf"], objects["pe"]
code_id = elf["code_id"].lower()
layout = {
    os.path.join(code_id[:2], code_id[2:] + ".debug"): elf["files"]["debug"],
    os.path.join(pe["debug_file"], pe["breakpad_id"].upper(), pe["debug_file"]): pe["files"]["debug"],
}
for dest, src in layout.items():
    dest = os.path.join(root, dest)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    shutil.copyfile(os.path.join(base, src), dest)
    print(f"symbols: {os.path.relpath(dest, root)}", file=sys.stderr)
EOF

BODY="$TMP/body.json"
python3 - "$BODY_TEMPLATE" "$BODY" "$SYMBOLS" <<'EOF'
import json, sys
template, out, symbols = sys.argv[1:]
text = open(template).read()
assert "@SYMBOLS@" in text, "body template lacks the @SYMBOLS@ placeholder"
# JSON-escape the path (it goes inside a string literal).
open(out, "w").write(text.replace("@SYMBOLS@", json.dumps(symbols)[1:-1]))
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

# Cold request: builds the caches, and proves the body is what we think it is.
COLD="$TMP/cold.json"
start_ns=$(date +%s%N)
curl -fsS --max-time 60 -H 'Content-Type: application/json' --data-binary "@$BODY" \
    "$URL/symbolicate" -o "$COLD"
end_ns=$(date +%s%N)
echo "cold request: $(( (end_ns - start_ns) / 1000000 )) ms, $(wc -c <"$COLD") response bytes"
python3 - "$BODY" "$COLD" <<'EOF'
import json, sys
request = json.load(open(sys.argv[1]))
response = json.load(open(sys.argv[2]))
assert response.get("status") == "completed", f"status {response.get('status')!r}"
sent = sum(len(t["frames"]) for t in request["stacktraces"])
frames = [f for t in response["stacktraces"] for f in t["frames"]]
by_status = {}
for f in frames:
    by_status[f["status"]] = by_status.get(f["status"], 0) + 1
ok_inputs = sum(
    len({f.get("original_index") for f in t["frames"] if f["status"] == "symbolicated"})
    for t in response["stacktraces"]
)
modules = [(m.get("code_file"), m.get("debug_status")) for m in response["modules"]]
print(f"cold check: {ok_inputs}/{sent} input frames symbolicated "
      f"({len(frames)} output frames incl. inlinees, by status {by_status}); modules {modules}")
if ok_inputs != sent or set(by_status) != {"symbolicated"}:
    sys.exit("load.sh: not every frame was symbolicated")
if any(status != "found" for _, status in modules):
    sys.exit("load.sh: a module's debug file was not found")
EOF

echo "load: wrk -t$THREADS -c$CONNECTIONS -d$DURATION --latency, $RUNS runs"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
RPS=()
for run in $(seq "$RUNS"); do
    out="$TMP/wrk-$run.txt"
    OMNISYM_BODY="$BODY" wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency \
        -s "$LUA" "$URL/symbolicate" >"$out"
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
