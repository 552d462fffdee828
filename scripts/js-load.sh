#!/usr/bin/env bash
# Load test of warm `POST /symbolicate-js` on loopback: 30 frames of the project's
# esbuild bundle (fixtures/js), served as an artifact bundle by a stand-in for Sentry's
# artifact lookup (python3 -m http.server over a directory: `lookup` answers with the
# bundle, `files/bundle.zip` is the bundle, written by `cargo run --example
# artifact_bundle` with symbolic's writer). One cold request checks that every frame
# resolves; then wrk -t2 -c32 -d10s RUNS times, the median requests/s and the server's
# peak RSS (VmHWM).
#
# Environment: RUNS (default 5), DURATION (default 10s), CONNECTIONS (default 32),
# THREADS (default 2), KEEP_TMP=1 to keep the temp dir.
set -euo pipefail
cd "$(dirname "$0")/.."

. scripts/load-common.sh

SENTRY="$TMP/sentry"
mkdir -p "$SENTRY/files"
cargo build --release --example artifact_bundle
DEBUG_ID="$("${CARGO_TARGET_DIR:-target}"/release/examples/artifact_bundle "$SENTRY/files/bundle.zip")"
SENTRY_PORT="$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')"
SENTRY_URL="http://127.0.0.1:$SENTRY_PORT"
printf '[{"type":"bundle","id":"1","url":"%s/files/bundle.zip","resolved_with":"debug-id"}]' \
    "$SENTRY_URL" >"$SENTRY/lookup"
python3 -m http.server "$SENTRY_PORT" --bind 127.0.0.1 --directory "$SENTRY" \
    >"$TMP/sentry.log" 2>&1 &
SENTRY_PID=$!
trap 'kill "$SENTRY_PID" 2>/dev/null || true; cleanup' EXIT

# The Sentry stand-in is on loopback, like every test server here.
start_server "connect_to_reserved_ips: true"

BODY="$TMP/body.json"
python3 - fixtures/js/manifest.json "$SENTRY_URL" "$DEBUG_ID" "$BODY" <<'PY'
import json, sys
manifest, sentry, debug_id, out = sys.argv[1:]
frames = json.load(open(manifest))["frames"]
url = "https://app.example/assets/debugid.min.js"
raw = [{"abs_path": url, "lineno": f["minified"]["line"], "colno": f["minified"]["column"],
        "function": f["minified"]["function"]} for f in frames]
raw = (raw * (30 // len(raw) + 1))[:30]
json.dump({
    "source": {"type": "sentry", "id": "sentry:project", "url": f"{sentry}/lookup", "token": "t"},
    "stacktraces": [{"frames": raw}],
    "modules": [{"type": "sourcemap", "code_file": url, "debug_id": debug_id}],
    "options": {"apply_source_context": True, "frame_order": "callee_first"},
}, open(out, "w"))
PY

COLD="$TMP/cold.json"
cold_request /symbolicate-js "$BODY" "$COLD"
python3 - "$COLD" <<'PY'
import json, sys
response = json.load(open(sys.argv[1]))
assert response.get("status") == "completed", response.get("status")
frames = response["stacktraces"][0]["frames"]
resolved = sum(1 for f in frames if f["data"].get("symbolicated"))
print(f"cold check: {resolved}/{len(frames)} frames resolved to their original sources")
if resolved != len(frames) or response.get("errors"):
    sys.exit(f"js-load.sh: not every frame resolved: {response.get('errors')}")
PY

load_runs /symbolicate-js "$BODY"
