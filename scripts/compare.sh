#!/usr/bin/env bash
# omnisym against upstream Symbolicator, every workload of the load scripts in one run,
# each with both servers in alternating rounds (see scripts/load-common.sh), then one
# markdown table of the medians, the ratios omnisym / upstream and each server's peak
# RSS, and the differences found between their answers.
#
#   UPSTREAM_BIN=/path/to/symbolicator scripts/compare.sh
#   UPSTREAM_BIN=... DURATION=3s ROUNDS=2 scripts/compare.sh     # a quick one
#
# Workloads (wrk -t2 -c32 where it is wrk): warm /symbolicate (load.sh), warm
# /symbolicate of each generated native crash of WORKLOADS (load.sh:NAME, that is load.sh
# with WORKLOAD=NAME; default all of cxx-o2 cxx-o3 rust-legacy rust-v0 large), warm
# /symbolicate-js (js-load.sh), warm /symbolicate-jvm (jvm-load.sh), GET /healthcheck
# (health-load.sh), warm /minidump of each dump of fixtures/minidump, sequential
# (minidump-load.sh, VARIANT=all), cold /symbolicate of the large DWARF file
# (cold-bench.sh), cold /symbolicate-js of the large source map (cold-js-bench.sh), and
# cold and warm /minidump of a generated crash of 160 modules and 40 threads with 190
# MiB of Breakpad symbols (large-minidump-bench.sh). ONLY (a space-separated list of
# those script names, load.sh:NAME included) runs some of them. The environment passes
# on: ROUNDS (3), DURATION (10s), N (sequential /minidump requests a round: 200 in
# minidump-load.sh, 50 in large-minidump-bench.sh), LARGE, BIG_DIR, BIGDUMP_DIR, ...
# Each script's output goes to LOG_DIR (a new temp dir unless set), and is echoed. A workload that fails is
# said so in the table, and the others still run; the exit status is then 1.
#
# Memory: upstream keeps every answer for 90 s (for `/requests/ID` polls), so under wrk
# it grows with requests/s x answer size; with the defaults its warm JS row peaked at
# about 15 GiB on a 2-core machine. The run warns when less than 16 GiB is available.
set -euo pipefail
cd "$(dirname "$0")/.."

[ -n "${UPSTREAM_BIN:-}" ] || { echo "compare.sh: set UPSTREAM_BIN to upstream Symbolicator's binary" >&2; exit 2; }
[ -x "$UPSTREAM_BIN" ] || { echo "compare.sh: $UPSTREAM_BIN is not an executable" >&2; exit 2; }
UPSTREAM_BIN="$(cd "$(dirname "$UPSTREAM_BIN")" && pwd)/$(basename "$UPSTREAM_BIN")"
export UPSTREAM_BIN

# One build for every script.
if [ -z "${BIN:-}" ]; then
    cargo build --release --bin omnisym
    BIN="$(pwd)/${CARGO_TARGET_DIR:-target}/release/omnisym"
fi
export BIN

LOG_DIR="${LOG_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/omnisym-compare.XXXXXX")}"
mkdir -p "$LOG_DIR"
export COMPARE_OUT="$LOG_DIR/results.tsv"
: >"$COMPARE_OUT"

# load.sh:NAME is load.sh with WORKLOAD=NAME, a generated native crash (scripts/workloads/).
WORKLOADS="${WORKLOADS:-cxx-o2 cxx-o3 rust-legacy rust-v0 large}"
SCRIPTS="${ONLY:-load.sh $(printf 'load.sh:%s ' $WORKLOADS)js-load.sh jvm-load.sh health-load.sh minidump-load.sh cold-bench.sh cold-js-bench.sh large-minidump-bench.sh}"
echo "omnisym: $BIN"
echo "upstream: $UPSTREAM_BIN ($("$UPSTREAM_BIN" --version | head -n1))"
echo "rounds: ${ROUNDS:-3}, wrk duration: ${DURATION:-10s}, logs: $LOG_DIR"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores"
AVAILABLE_KB="$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)"
if [ "$AVAILABLE_KB" -lt $(( 16 * 1024 * 1024 )) ]; then
    echo "WARNING: $(( AVAILABLE_KB / 1048576 )) GiB of memory available; upstream's warm rows may" \
        "need more (it holds 90 s of answers): shorten DURATION or ROUNDS if it runs short" >&2
fi

status=0
for script in $SCRIPTS; do
    echo
    echo "=== $script"
    start=$(date +%s)
    log="$LOG_DIR/${script%.sh}.log"
    if [ "$script" = minidump-load.sh ]; then
        run=(env VARIANT="${VARIANT:-all}" bash "scripts/$script")
    elif [ "${script%%:*}" = load.sh ]; then
        workload=""
        [ "$script" = load.sh ] || workload="${script#*:}"
        run=(env WORKLOAD="$workload" bash scripts/load.sh)
        [ -z "$workload" ] || log="$LOG_DIR/load-$workload.log"
    else
        run=(bash "scripts/$script")
    fi
    if "${run[@]}" 2>&1 | tee "$log"; then
        echo "=== $script: done in $(( $(date +%s) - start )) s"
    else
        echo "=== $script: FAILED (see $log)"
        printf 'failed\t%s\n' "$script" >>"$COMPARE_OUT"
        status=1
    fi
done

echo
python3 - "$COMPARE_OUT" "${ROUNDS:-3}" "${DURATION:-10s}" <<'PY'
import sys
path, rounds, duration = sys.argv[1:]
rows, notes, failed, values = [], [], [], {}
for line in open(path):
    kind, *fields = line.rstrip("\n").split("\t")
    if kind == "result":
        work, server, value, unit, peak = fields
        if work not in values:
            rows.append(work)
            values[work] = {"unit": unit}
        values[work][server] = (value, peak)
    elif kind == "note":
        notes.append(fields)
    elif kind == "failed":
        failed.append(fields[0])

def num(text):
    try:
        return float(text)
    except ValueError:
        return None

def shown(value, unit):
    v = num(value)
    if v is None:
        return value
    return f"{v:,.0f} {unit}" if v >= 100 else f"{v:.1f} {unit}"

def mib(peak):
    return f"{float(peak) / 1024:,.0f} MiB" if num(peak) else "n/a"

print(f"omnisym vs upstream Symbolicator: medians of {rounds} alternating rounds "
      f"(wrk -d{duration}); the ratio is omnisym / upstream for every row: for req/s "
      "above 1 means omnisym serves more, for ms below 1 means omnisym answers sooner; "
      "peak RSS is each server's VmHWM over the workload.")
print()
print("| work | upstream | omnisym | omnisym / upstream | upstream peak RSS | omnisym peak RSS |")
print("|---|---:|---:|---:|---:|---:|")
for work in rows:
    v = values[work]
    unit = v["unit"]
    up, om = v.get("upstream", ("n/a", "")), v.get("omnisym", ("n/a", ""))
    a, b = num(om[0]), num(up[0])
    if a is not None and b:
        better = "more is faster" if unit == "req/s" else "less is faster"
        ratio = f"{a / b:.2f} ({better})"
    else:
        ratio = "n/a"
    print(f"| {work} | {shown(up[0], unit)} | {shown(om[0], unit)} | {ratio} "
          f"| {mib(up[1])} | {mib(om[1])} |")
for script in failed:
    print(f"| {script} | failed | failed | | | |")
print()
if notes:
    print("Where the two servers' answers differ, or upstream did not answer (details in the logs):")
    for work, text in notes:
        print(f"- {work}: {text}")
else:
    print("The answers of the two servers agree on every compared frame.")
PY
echo
echo "logs: $LOG_DIR"
exit "$status"
