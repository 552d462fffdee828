#!/usr/bin/env bash
# The mixed soak: native /symbolicate warm and cold, /minidump, /symbolicate-js,
# /symbolicate-jvm, Mozilla's /symbolicate/v5, /proxy and symbfile uploads, all at once
# against one server on loopback, with a symbol source behind a fault proxy that stalls,
# resets and trickles in turns (tests/integration/soak.rs, which this script runs). The
# server's RSS is sampled every SAMPLE_SECS into a CSV; at the end the script prints the
# answers by kind per operation, and the RSS at the start, its peak and at the end.
# Fails if any answer was a 5xx, a transport error, a hang or a wrong frame.
#
# Usage: scripts/soak.sh                 (30 minutes, release build)
#        DURATION=2m PROFILE=debug scripts/soak.sh
# Environment: DURATION (seconds or with an s/m/h suffix; default 30m), MAX_REQUESTS
# (stops earlier after this many; default 1000000), WORKERS (concurrent clients,
# default 8), SAMPLE_SECS (default 5), CSV (default soak-rss-<date>.csv in the current
# directory), PROFILE (release or debug: the server build; default release), BIN (a
# server binary to use instead of building one).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
START_DIR="$(pwd)"
cd "$ROOT"

DURATION="${DURATION:-30m}"
PROFILE="${PROFILE:-release}"
CSV="${CSV:-$START_DIR/soak-rss-$(date +%Y%m%d-%H%M%S).csv}"
case "$CSV" in /*) ;; *) CSV="$START_DIR/$CSV" ;; esac

seconds() {
    local value=$1
    case "$value" in
        *h) echo $(( ${value%h} * 3600 )) ;;
        *m) echo $(( ${value%m} * 60 )) ;;
        *s) echo "${value%s}" ;;
        *) echo "$value" ;;
    esac
}
SECS="$(seconds "$DURATION")"
[[ "$SECS" =~ ^[0-9]+$ ]] || { echo "soak.sh: DURATION $DURATION is not a duration" >&2; exit 2; }

# PROFILE=debug uses the binary `cargo test` builds for the driver (a plain
# `cargo build` would rebuild the dependencies with other features).
if [ -z "${BIN:-}" ] && [ "$PROFILE" = release ]; then
    cargo build --locked --release --bin omnisym
    TARGET_DIR="$(cargo metadata --format-version 1 --no-deps \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
    BIN="$TARGET_DIR/release/omnisym"
fi
if [ -n "${BIN:-}" ]; then
    [ -x "$BIN" ] || { echo "soak.sh: no server binary at $BIN" >&2; exit 2; }
    export OMNISYM_BIN="$BIN"
fi
echo "soak: ${BIN:-the debug build} for ${SECS}s, RSS samples in $CSV"

# The driver is a debug build: it only sends requests. A hard stop well past the
# duration, should anything hang.
LOG="$(mktemp)"
trap 'rm -f "$LOG"' EXIT
status=0
SOAK_SECS="$SECS" SOAK_CSV="$CSV" \
    SOAK_MAX_ITERATIONS="${MAX_REQUESTS:-1000000}" SOAK_WORKERS="${WORKERS:-8}" \
    SOAK_SAMPLE_SECS="${SAMPLE_SECS:-5}" \
    timeout --kill-after=30 $(( SECS + 600 )) \
    cargo test --locked --test integration -- --ignored --nocapture soak:: >"$LOG" 2>&1 || status=$?

grep -E '^(soak:|SOAK-ROW|SOAK-RSS|  failure:)' "$LOG" | sed -e 's/^SOAK-ROW //' -e 's/^SOAK-RSS /RSS: /' || true
if [ -s "$CSV" ]; then
    awk -F, 'NR > 1 { n++; s[n] = $1; r[n] = $2; an[n] = $3; fi[n] = $4; if ($2 > peak) { peak = $2; at = $1 } }
        END {
            if (n == 0) exit
            printf "RSS curve: start %.1f MiB, peak %.1f MiB (at %d s), end %.1f MiB; %d samples\n",
                r[1] / 1024, peak / 1024, at, r[n] / 1024, n
            # Flatness: the last quarter against the second quarter (past the warm-up),
            # in all and split into the heap (anonymous) and the mapped cache files.
            q = int(n / 4)
            if (q >= 1) {
                for (i = q + 1; i <= 2 * q; i++) { a += r[i]; aa += an[i]; af += fi[i] }
                for (i = n - q + 1; i <= n; i++) { b += r[i]; ba += an[i]; bf += fi[i] }
                printf "RSS second quarter mean %.1f MiB, last quarter mean %.1f MiB (%+.1f%%)\n",
                    a / q / 1024, b / q / 1024, (b - a) * 100 / a
                printf "  anonymous %.1f -> %.1f MiB, file-backed %.1f -> %.1f MiB\n",
                    aa / q / 1024, ba / q / 1024, af / q / 1024, bf / q / 1024
            }
        }' "$CSV"
fi
if [ "$status" -ne 0 ]; then
    echo "soak.sh: the soak failed (exit $status); the driver's output ends:" >&2
    tail -n 40 "$LOG" >&2
fi
exit "$status"
