#!/usr/bin/env bash
# Cold `POST /symbolicate-js` on a large source map: time to the first answer, and the
# server's peak RSS once the work of that request is done.
#
# The large map is scripts/gen-big-sourcemap.sh's (seed SEED, 3: about 28 MiB of map
# for a 9 MiB bundle of npm packages), made once into target/cold-js-bench/seed-SEED
# unless BIG_DIR names a directory holding big.min.js and big.min.js.map. The minified
# file gets a `//# debugId=` comment (an id derived from the map's hash, as
# `sentry-cli sourcemaps inject` would add one) and both go into an artifact bundle
# (`cargo run --release --example artifact_bundle`, symbolic's writer), served by the
# Sentry stand-in of scripts/js-load.sh. One request asks for FRAMES (30) positions
# picked at random (seed SEED) in the minified code. Each of RUNS (3) runs starts the
# server on an empty cache, times the request, waits until the server is idle, and
# reads its VmHWM. Medians at the end.
#
# With UPSTREAM_BIN (a build of upstream Symbolicator, see scripts/load-common.sh),
# each of ROUNDS (3) rounds runs omnisym and then upstream the same way; the first
# round's answers are compared, and the medians come with the ratios omnisym / upstream.
#
#   scripts/cold-js-bench.sh
#   UPSTREAM_BIN=/path/to/symbolicator ROUNDS=5 scripts/cold-js-bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS="${RUNS:-3}"
FRAMES="${FRAMES:-30}"
SEED="${SEED:-3}"

. scripts/load-common.sh

if [ -z "${BIG_DIR:-}" ]; then
    BIG_DIR="target/cold-js-bench/seed-$SEED"
    if [ ! -f "$BIG_DIR/big.min.js.map" ]; then
        ensure_pkg node nodejs
        ensure_pkg npm npm
        rm -rf "$BIG_DIR.tmp"
        bash scripts/gen-big-sourcemap.sh "$BIG_DIR.tmp" "$SEED"
        mv "$BIG_DIR.tmp" "$BIG_DIR"
    fi
fi
[ -f "$BIG_DIR/big.min.js" ] && [ -f "$BIG_DIR/big.min.js.map" ] \
    || die "no big.min.js and big.min.js.map in $BIG_DIR"

ASSETS="$TMP/assets"
SENTRY="$TMP/sentry"
mkdir -p "$ASSETS" "$SENTRY/files"
python3 - "$BIG_DIR" "$ASSETS" <<'PY'
import hashlib, os, shutil, sys, uuid
big, assets = sys.argv[1:]
with open(os.path.join(big, "big.min.js.map"), "rb") as f:
    debug_id = uuid.UUID(bytes=hashlib.sha256(f.read()).digest()[:16], version=4)
text = open(os.path.join(big, "big.min.js"), encoding="utf-8").read()
with open(os.path.join(assets, "big.min.js"), "w", encoding="utf-8") as f:
    f.write(text.rstrip("\n") + f"\n//# debugId={debug_id}\n")
shutil.copyfile(os.path.join(big, "big.min.js.map"), os.path.join(assets, "big.min.js.map"))
PY
cargo build --release --example artifact_bundle
DEBUG_ID="$("${CARGO_TARGET_DIR:-target}"/release/examples/artifact_bundle "$SENTRY/files/bundle.zip" \
    "$ASSETS/big.min.js" "$ASSETS/big.min.js.map")"
WORK="${WORK:-cold /symbolicate-js, $(file_mib "$ASSETS/big.min.js.map") MiB source map}"
echo "source map: $(file_mib "$ASSETS/big.min.js.map") MiB, minified $(file_mib "$ASSETS/big.min.js") MiB," \
    "artifact bundle $(file_mib "$SENTRY/files/bundle.zip") MiB, debug id $DEBUG_ID"
start_sentry "$SENTRY"

URL_JS=https://app.example/assets/big.min.js
python3 - "$ASSETS/big.min.js" "$URL_JS" "$FRAMES" "$SEED" "$TMP/frames.json" <<'PY'
import bisect, json, random, sys
minified, url, count, seed, out = sys.argv[1:]
lines = open(minified, encoding="utf-8").read().split("\n")
# Positions in the code (not in the trailing comments), any line, by length.
code = [(i, len(l)) for i, l in enumerate(lines) if l and not l.startswith("//#")]
ends, total = [], 0
for _, n in code:
    total += n
    ends.append(total)
rng = random.Random(int(seed))
frames = []
for offset in sorted(rng.sample(range(total), int(count))):
    k = bisect.bisect_right(ends, offset)
    line, start = code[k][0], ends[k] - code[k][1]
    frames.append({"abs_path": url, "lineno": line + 1, "colno": offset - start + 1})
json.dump(frames, open(out, "w"))
print(f"request: {count} positions in {len(lines)} lines of minified code")
PY
BODY="$TMP/body.json"
js_body "$BODY" "$URL_JS" "$DEBUG_ID" "$TMP/frames.json"

frames_resolved() {
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); fs=r["stacktraces"][0]["frames"]; print("%d/%d frames resolved" % (sum(1 for f in fs if f.get("data", {}).get("symbolicated")), len(fs)))' "$1"
}

# The Sentry stand-in is on loopback.
cold_runs /symbolicate-js "$BODY" "connect_to_reserved_ips: true" wait_idle frames_resolved
