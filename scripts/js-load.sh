#!/usr/bin/env bash
# Load test of warm `POST /symbolicate-js` on loopback: 30 frames of the project's
# esbuild bundle (fixtures/js), served as an artifact bundle by a stand-in for Sentry's
# artifact lookup (scripts/sentry-standin.py over a directory: `lookup` answers with the
# bundle, `files/bundle.zip` is the bundle, written by `cargo run --example
# artifact_bundle` with symbolic's writer). One cold request checks that every frame
# resolves; then wrk -t2 -c32 -d10s RUNS times, the median requests/s and the server's
# peak RSS (VmHWM).
#
# Environment: RUNS (default 5), DURATION (default 10s), CONNECTIONS (default 32),
# THREADS (default 2), KEEP_TMP=1 to keep the temp dir. UPSTREAM_BIN (a build of upstream
# Symbolicator) runs the same on upstream too, in ROUNDS (default 3) alternating rounds,
# and compares (scripts/load-common.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

WORK="warm /symbolicate-js"

. scripts/load-common.sh

SENTRY="$TMP/sentry"
mkdir -p "$SENTRY/files"
cargo build --release --example artifact_bundle
DEBUG_ID="$("${CARGO_TARGET_DIR:-target}"/release/examples/artifact_bundle "$SENTRY/files/bundle.zip")"
start_sentry "$SENTRY"

# The Sentry stand-in is on loopback, like every test server here.
start_server "connect_to_reserved_ips: true"

URL_JS=https://app.example/assets/debugid.min.js
python3 - fixtures/js/manifest.json "$URL_JS" "$TMP/frames.json" <<'PY'
import json, sys
manifest, url, out = sys.argv[1:]
frames = json.load(open(manifest))["frames"]
raw = [{"abs_path": url, "lineno": f["minified"]["line"], "colno": f["minified"]["column"],
        "function": f["minified"]["function"]} for f in frames]
json.dump((raw * (30 // len(raw) + 1))[:30], open(out, "w"))
PY
BODY="$TMP/body.json"
js_body "$BODY" "$URL_JS" "$DEBUG_ID" "$TMP/frames.json"

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
