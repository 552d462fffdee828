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
# KEEP_TMP=1 to keep the temp dir, CARGO_TARGET_DIR as cargo reads it. UPSTREAM_BIN (a
# build of upstream Symbolicator) runs the same on upstream too, in ROUNDS (default 3)
# alternating rounds, and compares (scripts/load-common.sh). JVM_SOURCE says where the
# mapping is served from: `filesystem` (the default alone: the unified layout above) or
# `sentry` (the default with UPSTREAM_BIN: a stand-in for Sentry's debug-file search,
# scripts/sentry-standin.py, as self-hosted Sentry serves mappings; upstream finds
# ProGuard files only there, its unified layout has no path for them).
set -euo pipefail
cd "$(dirname "$0")/.."

MAPPING_MB="${MAPPING_MB:-5}"
FRAMES="${FRAMES:-30}"
BODY_TEMPLATE=benches/load/jvm-body.json
WORK="warm /symbolicate-jvm"
# Any fixed uuid does; fixed so the cache key is the same from run to run.
UUID=3c5e7a9b-1d2f-4a6c-8e0b-2d4f6a8c0e13

. scripts/load-common.sh

JVM_SOURCE="${JVM_SOURCE:-$(comparing && echo sentry || echo filesystem)}"
SYMBOLS="$TMP/symbols"
HEX="${UUID//-/}"
MAPPING="$SYMBOLS/${HEX:0:2}/${HEX:2}/proguard"
EXTRA=""
case "$JVM_SOURCE" in
    filesystem) SOURCE="" ;;
    sentry)
        SENTRY="$TMP/sentry"
        MAPPING="$SENTRY/difs/$UUID/proguard"
        start_sentry "$SENTRY"
        SOURCE="{\"type\": \"sentry\", \"id\": \"sentry:project\", \"url\": \"$SENTRY_URL/difs/\", \"token\": \"t\"}"
        # The Sentry stand-in is on loopback.
        EXTRA="connect_to_reserved_ips: true"
        ;;
    *) die "JVM_SOURCE is filesystem or sentry, not $JVM_SOURCE" ;;
esac
mkdir -p "$(dirname "$MAPPING")"
python3 scripts/gen-proguard-mapping.py "$MAPPING" --size-mb "$MAPPING_MB" --seed 1
echo "mapping: $(wc -c <"$MAPPING") bytes at ${MAPPING#"$TMP/"}, $JVM_SOURCE source"

BODY="$TMP/body.json"
python3 - "$BODY_TEMPLATE" "$BODY" "$SYMBOLS" "$UUID" "$MAPPING" "$FRAMES" "$SOURCE" <<'EOF'
import json, re, sys
template, out, symbols, uuid, mapping, count, other_source = sys.argv[1:]
count = int(count)
body = json.load(open(template))
source, module = body["sources"][0], body["modules"][0]
stacktrace = body["stacktraces"][0]
assert source["path"] == "@SYMBOLS@" and module["uuid"] == "@UUID@" \
    and stacktrace["frames"] == "@FRAMES@", "body template lacks a placeholder"
source["path"], module["uuid"] = symbols, uuid
if other_source:
    body["sources"] = [json.loads(other_source)]

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

start_server "$EXTRA"

# Cold request: builds the ProGuard cache, and proves the body is what we think it is.
COLD="$TMP/cold.json"
cold_request /symbolicate-jvm "$BODY" "$COLD"
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

load_runs /symbolicate-jvm "$BODY"
