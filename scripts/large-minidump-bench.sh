#!/usr/bin/env bash
# Cold and warm POST /minidump of a large crash: the minidump of
# scripts/gen-large-minidump.py (seed BIGDUMP_SEED, 25: a Linux x86_64 process of
# BIGDUMP_MODULES (160) modules and BIGDUMP_THREADS (40) threads, 10 to 30 frames each
# through the modules; every module with a Breakpad .sym file, BIGDUMP_LARGE (4) of them
# of about 0.5, 0.8, 1.2 and 1.5 times BIGDUMP_LARGE_MIB (40) MiB, the others around
# BIGDUMP_SMALL_KIB (200) KiB), with its symbols behind a filesystem source in the
# native layout, given in the request.
#   1. cold: RUNS (3) runs, each on a fresh server with an empty cache: the time to the
#      answer (walking every stack with the STACK CFI of the modules it passes, and
#      symbolicating every frame), and the server's peak RSS once the work the request
#      started is done. The .sym files were just written, so the OS has them in memory:
#      this is the servers' work, not the disk's.
#   2. warm: on one server, after the cold request and one more, N (50) sequential
#      requests: median and p90 latency (curl's time_total), and the peak RSS over the
#      warm ones (the kernel's high-water mark is reset after the two requests before
#      them, whose conversions are the cold step's, once the server is idle).
# Each answer of the first cold run is checked against the generator's expected.json
# (every thread's frames, functions, lines and trusts; every module's status): a wrong
# omnisym answer ends the script, a wrong upstream answer is noted.
#
#   scripts/large-minidump-bench.sh
#   UPSTREAM_BIN=/path/to/symbolicator ROUNDS=2 N=30 scripts/large-minidump-bench.sh
#   BIGDUMP_DIR=/tmp/bigdump scripts/large-minidump-bench.sh   # generate once, reuse
#
# With UPSTREAM_BIN (a build of upstream Symbolicator, see scripts/load-common.sh) both
# run: the cold step becomes ROUNDS (3) rounds of a run per server, in turn, and the warm
# step ROUNDS rounds of N requests per server, in turn; the first round's answers are
# compared (scripts/compare_answers.py), and each server's medians, p90s and peak RSS
# come with the ratios omnisym / upstream. COMPARE_OUT gets the rows for compare.sh.
# Generating the default dump takes about 10 s and 190 MiB under BIGDUMP_DIR (else a
# temp dir, removed on exit). Needs: python3 (stdlib only), curl, Linux /proc.
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS="${RUNS:-3}"
N="${N:-50}"
# Prefixed: THREADS is wrk's and LARGE cold-bench.sh's, and compare.sh passes both on.
GEN_ARGS=(--seed "${BIGDUMP_SEED:-25}" --modules "${BIGDUMP_MODULES:-160}"
    --threads "${BIGDUMP_THREADS:-40}" --large "${BIGDUMP_LARGE:-4}"
    --large-mib "${BIGDUMP_LARGE_MIB:-40}" --small-kib "${BIGDUMP_SMALL_KIB:-200}")

. scripts/load-common.sh

# The dump and its symbols: generated into BIGDUMP_DIR unless this generator made what
# is there with the same arguments. Only the generator's outputs are replaced.
DUMP_DIR="${BIGDUMP_DIR:-$TMP/bigdump}"
STAMP="$(sha1sum scripts/gen-large-minidump.py | cut -c1-12) ${GEN_ARGS[*]}"
if [ "$(cat "$DUMP_DIR/generated-with" 2>/dev/null)" != "$STAMP" ]; then
    rm -rf "$DUMP_DIR/symbols" "$DUMP_DIR/crash.dmp" "$DUMP_DIR/expected.json"
    python3 scripts/gen-large-minidump.py "$DUMP_DIR" "${GEN_ARGS[@]}"
    echo "$STAMP" >"$DUMP_DIR/generated-with"
fi
DUMP_DIR="$(cd "$DUMP_DIR" && pwd)"
read -r MODULE_COUNT THREAD_COUNT FRAME_COUNT SYM_MIB < <(python3 - "$DUMP_DIR/expected.json" <<'PY'
import json, sys
e = json.load(open(sys.argv[1]))
print(len(e["modules"]), len(e["threads"]), sum(len(t["frames"]) for t in e["threads"]),
      "%.0f" % (sum(m["sym_bytes"] for m in e["modules"]) / 1048576))
PY
)
echo "dump: $DUMP_DIR/crash.dmp ($(file_mib "$DUMP_DIR/crash.dmp") MiB): $MODULE_COUNT modules," \
    "$THREAD_COUNT threads, $FRAME_COUNT stack frames (inlinees not counted); .sym files $SYM_MIB MiB"
LABEL="$MODULE_COUNT modules, $THREAD_COUNT threads, $SYM_MIB MiB .sym"

# The upload: the dump, the source, and no options.
BODY="$TMP/body.multipart"
BOUNDARY="omnisym-large-minidump-25"
python3 - "$DUMP_DIR" "$BODY" "$BOUNDARY" <<'PY'
import json, os, sys
dump_dir, out, boundary = sys.argv[1:]
source = [{"type": "filesystem", "id": "large", "path": os.path.join(dump_dir, "symbols"),
           "layout": {"type": "native"}}]
def field(name, data, filename=None):
    head = '--%s\r\nContent-Disposition: form-data; name="%s"' % (boundary, name)
    if filename:
        head += '; filename="%s"\r\nContent-Type: application/octet-stream' % filename
    return head.encode() + b"\r\n\r\n" + data + b"\r\n"
with open(out, "wb") as f:
    f.write(field("upload_file_minidump", open(os.path.join(dump_dir, "crash.dmp"), "rb").read(), "crash.dmp")
            + field("sources", json.dumps(source).encode()) + field("options", b"{}")
            + ("--%s--\r\n" % boundary).encode())
PY
export BODY_TYPE="multipart/form-data; boundary=$BOUNDARY"

frames_found() {
    python3 -c 'import json, sys
a = json.load(open(sys.argv[1]))
t = a.get("stacktraces") or []
f = [x for s in t for x in s.get("frames") or []]
print(len(t), "threads,", len(f), "frames,", sum(x.get("status") == "symbolicated" for x in f), "symbolicated")' "$1"
}

# check_answer NAME ANSWER WORK: ANSWER against expected.json; a wrong omnisym answer
# ends the script, another server's is noted.
check_answer() {
    local report
    report="$(python3 scripts/gen-large-minidump.py "$DUMP_DIR" --check "$2")" && return 0
    echo "$1's answer is not the generated crash:"
    sed 's/^/    /' <<<"$report"
    [ "$1" != omnisym ] || die "omnisym's answer differs from $DUMP_DIR/expected.json"
    record_note "$3" "$1's answer differs from expected.json: $(tail -n1 <<<"$report")"
}

echo
echo "=== cold /minidump"
WORK="cold /minidump, $LABEL" cold_runs /minidump "$BODY" "" wait_idle frames_found
for name in $(active_servers); do
    check_answer "$name" "$(answer_path "$TMP/cold-1.json" "$name")" "cold /minidump, $LABEL"
done

echo
echo "=== warm /minidump"
WORK="warm /minidump, $LABEL"
start_server ""
declare -A TIMES_OF=()
for name in "${SERVERS[@]}"; do
    for _ in 1 2; do
        post_timed "${URL_OF[$name]}/minidump" "$BODY" "$TMP/warm-up.json"
        answered "$name" "$WORK" "$TMP/warm-up.json" || break
    done
    [ -z "${SKIP[$name]:-}" ] || continue
    echo "$name: warm-up answered in $LAST_MS ms"
    # A cold request answered from lazy readers leaves its conversions running; the
    # warm requests are measured once they are done.
    wait_idle "$name"
    # VmHWM from here on (Linux >= 4.0): what the warm requests take.
    echo 5 >"/proc/${PID_OF[$name]}/clear_refs"
done
rounds=1
comparing && rounds=$ROUNDS
for round in $(seq "$rounds"); do
    for name in $(active_servers); do
        times=()
        for _ in $(seq "$N"); do
            result="$(curl -sS --max-time 120 -H "Content-Type: $BODY_TYPE" --data-binary "@$BODY" \
                -o "$TMP/warm.json" -w '%{http_code} %{time_total}' "${URL_OF[$name]}/minidump")"
            [ "${result%% *}" = 200 ] || die "$name answered HTTP ${result%% *} to a warm request: $(head -c 300 "$TMP/warm.json")"
            times+=("$(awk -v s="${result#* }" 'BEGIN {printf "%.1f", s * 1000}')")
        done
        label="$N sequential"
        comparing && label="round $round/$rounds, $name, $label"
        echo "$label: median $(median "${times[@]}") ms, p90 $(p90 "${times[@]}") ms"
        TIMES_OF[$name]+=" ${times[*]}"
    done
done
declare -A MEDIAN_OF=() P90_OF=() HWM_OF=()
for name in "${SERVERS[@]}"; do
    if [ -z "${TIMES_OF[$name]:-}" ]; then
        record "$WORK, median" "$name" n/a ms
        record "$WORK, p90" "$name" n/a ms
        continue
    fi
    MEDIAN_OF[$name]="$(median ${TIMES_OF[$name]})"
    P90_OF[$name]="$(p90 ${TIMES_OF[$name]})"
    HWM_OF[$name]="$(peak_kb "$name")"
    label=""
    comparing && label="$name, "
    echo "${label}warm over $(wc -w <<<"${TIMES_OF[$name]}") requests: median ${MEDIAN_OF[$name]} ms," \
        "p90 ${P90_OF[$name]} ms, peak RSS $(mib "${HWM_OF[$name]}") MiB"
    record "$WORK, median" "$name" "${MEDIAN_OF[$name]}" ms "${HWM_OF[$name]}"
    record "$WORK, p90" "$name" "${P90_OF[$name]}" ms "${HWM_OF[$name]}"
    server_log "$name"
done
if comparing && [ -n "${MEDIAN_OF[upstream]:-}" ]; then
    echo "omnisym / upstream: median $(ratio "${MEDIAN_OF[omnisym]}" "${MEDIAN_OF[upstream]}")," \
        "p90 $(ratio "${P90_OF[omnisym]}" "${P90_OF[upstream]}") (below 1: omnisym answers sooner)," \
        "peak RSS $(ratio "${HWM_OF[omnisym]}" "${HWM_OF[upstream]}")"
fi
