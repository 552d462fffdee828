#!/usr/bin/env bash
# omnisym and upstream Symbolicator side by side on debug files from generate.sh (issue 45;
# not run by CI). One file at a time, one server at a time, each with a fresh cache dir and
# the file in a filesystem source (unified layout, by symlink: nothing is copied).
#
#   scripts/bigfiles/bench.sh FILE...      FILE: a debug file with FILE.truth.json beside it
#
# Per server and file, one markdown row:
#   first answer   seconds from a cold /symbolicate of one truth address to its answer
#                  (upstream answers only when its SymCache is built)
#   conversion     omnisym: until its SymCache is in cache_dir and it has used no CPU for
#                  IDLE_SECS (2); upstream: its answer time
#   peak RssAnon / RssFile, apart: /proc/PID/status every 50 ms from the request until idle
#   cache          disk used by the cache dir then
#   correct        SAMPLE (1000) truth addresses, warm: whole inline chain / outermost frame
#                  equal to llvm-symbolizer's (function, file, line; see answers.py norm())
#
# Env: OMNISYM_BIN (target/release/omnisym), UPSTREAM_BIN
# (/work/upstream/src/target/release/symbolicator), SERVERS ("omnisym upstream"),
# MEMCAP (e.g. 1G: the server runs in a cgroup v1 memory group of that limit; an OOM kill
# is reported), BENCH_TRACE (1: every RssAnon/RssFile sample to BENCH_WORK/SERVER/trace.tsv),
# SAMPLE, IDLE_SECS, PORT (a free one), BENCH_WORK (scratch dir; $TMPDIR/omnisym-bigfiles-bench;
# each server's config and log stay in BENCH_WORK/SERVER/, its cache is deleted).
set -euo pipefail

[ $# -ge 1 ] || { sed -n '2,20p' "$0" >&2; exit 2; }
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
OMNISYM_BIN=${OMNISYM_BIN:-$REPO/target/release/omnisym}
UPSTREAM_BIN=${UPSTREAM_BIN:-/work/upstream/src/target/release/symbolicator}
SERVERS=${SERVERS:-omnisym upstream}
WORK=${BENCH_WORK:-${TMPDIR:-/tmp}/omnisym-bigfiles-bench}

if [ -n "${MEMCAP:-}" ]; then
    case "$MEMCAP" in
        *[kK]) MEMCAP_BYTES=$(( ${MEMCAP%?} * 1024 )) ;;
        *[mM]) MEMCAP_BYTES=$(( ${MEMCAP%?} * 1024 * 1024 )) ;;
        *[gG]) MEMCAP_BYTES=$(( ${MEMCAP%?} * 1024 * 1024 * 1024 )) ;;
        *) MEMCAP_BYTES=$MEMCAP ;;
    esac
    [ -d /sys/fs/cgroup/memory ] || { echo "bench.sh: MEMCAP needs cgroup v1 at /sys/fs/cgroup/memory" >&2; exit 1; }
    export MEMCAP_BYTES
fi

specs=()
for s in $SERVERS; do
    case "$s" in
        omnisym) specs+=("omnisym=$OMNISYM_BIN") ;;
        upstream) specs+=("upstream=$UPSTREAM_BIN") ;;
        *) echo "bench.sh: unknown server $s" >&2; exit 2 ;;
    esac
done

header=1
for file in "$@"; do
    [ -f "$file.truth.json" ] || { echo "bench.sh: no $file.truth.json (made by generate.sh)" >&2; exit 1; }
    mkdir -p "$WORK"
    BENCH_HEADER=$header python3 "$HERE/bench.py" "$(readlink -f "$file")" "$WORK" "${specs[@]}"
    header=0
done
