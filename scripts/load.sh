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
# WORKLOAD=<name> benches a generated native crash instead (scripts/workloads/generate.sh:
# cxx-o2, cxx-o3, rust-legacy, rust-v0, large), built and run under gdb in the temp dir:
# the cold check then wants every frame of a module with symbols symbolicated, every
# frame of a module without them `missing`, and each module's debug_status to match
# (found, missing, or unused when no frame is in it).
#
# Environment: RUNS (default 5), DURATION (wrk -d, default 10s), CONNECTIONS (wrk -c,
# default 32), THREADS (wrk -t, default 2), LOG_LEVEL (default warn; info adds the access
# log line per request), KEEP_TMP=1 to keep the temp dir. UPSTREAM_BIN (a build of
# upstream Symbolicator) runs the same on upstream too, in ROUNDS (default 3) alternating
# rounds, and compares (scripts/load-common.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

BODY_TEMPLATE=benches/load/symbolicate-body.json
MANIFEST=fixtures/native/manifest.json
WORKLOAD="${WORKLOAD:-}"
WORK="warm /symbolicate${WORKLOAD:+ $WORKLOAD}"

. scripts/load-common.sh

if [ -n "$WORKLOAD" ]; then
    ensure_pkg gdb gdb
    ensure_pkg g++-12 g++-12
    scripts/workloads/generate.sh "$TMP/workload" "$WORKLOAD"
    BODY="$TMP/workload/body.json"
    start_server ""
    COLD="$TMP/cold.json"
    cold_request /symbolicate "$BODY" "$COLD"
    python3 scripts/workloads/check_answer.py "$TMP/workload/expect.json" "$COLD" \
        || die "omnisym's answer to $WORKLOAD does not check out"
    load_runs /symbolicate "$BODY"
    exit 0
fi

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

start_server ""

# Cold request: builds the caches, and proves the body is what we think it is.
COLD="$TMP/cold.json"
cold_request /symbolicate "$BODY" "$COLD"
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

load_runs /symbolicate "$BODY"
