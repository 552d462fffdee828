#!/usr/bin/env bash
# What the load scripts share: tools, the release build, a temp dir that is removed on
# exit, starting the server on a free loopback port, one cold request, and the wrk runs
# with their median requests/s and the server's peak RSS. Sourced, not run. RUNS (5),
# DURATION (10s), CONNECTIONS (32), THREADS (2) and LUA come from the environment.
#
# UPSTREAM_BIN names a build of upstream Symbolicator (26.8.0) to compare with: then
# every server is started twice, omnisym and upstream, each on its own empty cache with
# the same config and sources; the cold request goes to both (their answers are
# compared, see scripts/compare_answers.py), and the wrk runs become ROUNDS (3)
# alternating rounds, omnisym then upstream, with per-server medians, peak RSS and the
# ratio omnisym / upstream. COMPARE_OUT names a file the results are appended to, one
# tab-separated line each, for scripts/compare.sh's table.

RUNS="${RUNS:-5}"
ROUNDS="${ROUNDS:-3}"
DURATION="${DURATION:-10s}"
CONNECTIONS="${CONNECTIONS:-32}"
THREADS="${THREADS:-2}"
LUA="${LUA:-benches/load/post.lua}"
UPSTREAM_BIN="${UPSTREAM_BIN:-}"

die() {
    echo "$(basename "$0"): $*" >&2
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

# BIN names another build to load (say, an older one, to compare); else this tree's.
if [ -z "${BIN:-}" ]; then
    cargo build --release --bin omnisym
    BIN="${CARGO_TARGET_DIR:-target}/release/omnisym"
fi
[ -x "$BIN" ] || die "$BIN was not built"

# The servers a run measures: omnisym, and upstream when UPSTREAM_BIN is set.
SERVERS=(omnisym)
if [ -n "$UPSTREAM_BIN" ]; then
    [ -x "$UPSTREAM_BIN" ] || die "UPSTREAM_BIN=$UPSTREAM_BIN is not an executable"
    SERVERS+=(upstream)
    echo "comparing omnisym ($BIN) with upstream ($UPSTREAM_BIN: $("$UPSTREAM_BIN" --version | head -n1))"
fi
comparing() { [ "${#SERVERS[@]}" -gt 1 ]; }

TMP="$(mktemp -d "${TMPDIR:-/tmp}/omnisym-load.XXXXXX")"
declare -A URL_OF=() PID_OF=() SKIP=()
EXTRA_PIDS=()
stop_pid() {
    local pid=$1
    kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}
cleanup() {
    local pid
    for pid in "${PID_OF[@]}" "${EXTRA_PIDS[@]}"; do
        stop_pid "$pid"
    done
    if [ "${KEEP_TMP:-0}" = 1 ]; then
        echo "kept $TMP" >&2
    else
        rm -rf "$TMP"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start_one NAME EXTRA_YAML: server NAME (omnisym or upstream) on a free loopback port,
# with its config, log and an empty cache in $TMP/NAME; sets URL_OF[NAME], PID_OF[NAME].
# omnisym binds port 0 and prints the address it got; upstream cannot, so it is given a
# port that was free a moment before.
start_one() {
    local name=$1 extra=$2 dir="$TMP/$1" bind=127.0.0.1:0 url="" pid
    rm -rf "$dir/cache"
    mkdir -p "$dir"
    [ "$name" = upstream ] && bind="127.0.0.1:$(free_port)"
    cat >"$dir/config.yml" <<EOF
bind: $bind
cache_dir: $dir/cache
logging:
  level: ${LOG_LEVEL:-warn}
  format: ${LOG_FORMAT:-simplified}
$extra
EOF
    if [ "$name" = upstream ]; then
        "$UPSTREAM_BIN" --config "$dir/config.yml" run >"$dir/server.log" 2>&1 &
    else
        "$BIN" run -c "$dir/config.yml" 2>"$dir/server.log" &
    fi
    pid=$!
    PID_OF[$name]=$pid
    for _ in $(seq 300); do
        kill -0 "$pid" 2>/dev/null || { cat "$dir/server.log" >&2; die "$name exited"; }
        if [ "$name" = upstream ]; then
            url="http://$bind"
        else
            url="$(sed -n 's/^omnisym listening on \(http:[^ ]*\).*/\1/p' "$dir/server.log" | head -n1)"
        fi
        [ -n "$url" ] && curl -fsS --max-time 2 "$url/healthcheck" >/dev/null 2>&1 && break
        url=""
        sleep 0.1
    done
    [ -n "$url" ] || { cat "$dir/server.log" >&2; die "$name did not become healthy within 30s"; }
    URL_OF[$name]=$url
    echo "$name pid $pid at $url"
}

# stop_one NAME: stops server NAME and forgets it.
stop_one() {
    stop_pid "${PID_OF[$1]}"
    unset "PID_OF[$1]" "URL_OF[$1]"
}

# start_server EXTRA_YAML: every server of the run (see start_one).
start_server() {
    local name
    for name in "${SERVERS[@]}"; do
        start_one "$name" "$1"
    done
}

# The servers not skipped: a server whose cold answer was an error is not loaded.
active_servers() {
    local name
    for name in "${SERVERS[@]}"; do
        [ -n "${SKIP[$name]:-}" ] || echo "$name"
    done
}

# answer_path OUT NAME: where NAME's answer goes: OUT for omnisym, OUT.NAME otherwise.
answer_path() {
    if [ "$2" = omnisym ]; then echo "$1"; else echo "$1.$2"; fi
}

# peak_kb NAME [FIELD]: server NAME's VmHWM (or FIELD) in kB.
peak_kb() {
    awk -v f="${2:-VmHWM}:" '$1 == f {print $2}' "/proc/${PID_OF[$1]}/status"
}

mib() { awk -v k="$1" 'BEGIN {printf "%.1f", k / 1024}'; }
file_mib() { mib "$(( $(stat -c %s "$1") / 1024 ))"; }

# median V...: the middle value (the mean of the two middle ones for an even count).
median() {
    printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {
        if (NR % 2) print v[(NR+1)/2]; else printf "%.1f\n", (v[NR/2]+v[NR/2+1])/2 }'
}

# p90 V...: the value 90 % of the others are at or below (nearest rank).
p90() {
    printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {
        r = int(0.9 * NR + 0.5); if (r < 1) r = 1; print v[r] }'
}

# ratio A B: A / B to two decimals.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "n/a"}'; }

# record WORK NAME VALUE UNIT [PEAK_KB]: one result line for scripts/compare.sh, when
# COMPARE_OUT is set. UNIT req/s reads higher-is-better, ms lower-is-better.
record() {
    [ -n "${COMPARE_OUT:-}" ] || return 0
    printf 'result\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "${5:-}" >>"$COMPARE_OUT"
}

# record_note WORK TEXT: a line scripts/compare.sh prints under its table.
record_note() {
    [ -n "${COMPARE_OUT:-}" ] || return 0
    printf 'note\t%s\t%s\n' "$1" "$2" >>"$COMPARE_OUT"
}

# post_timed URL BODY OUT: POSTs the JSON BODY (or BODY_TYPE's), the answer to OUT;
# sets LAST_MS and LAST_CODE (the HTTP status, 000 when there was no answer).
post_timed() {
    local start_ns end_ns
    start_ns=$(date +%s%N)
    LAST_CODE=$(curl -sS --max-time "${COLD_TIMEOUT:-600}" -H "Content-Type: ${BODY_TYPE:-application/json}" \
        --data-binary "@$2" -o "$3" -w '%{http_code}' "$1") || true
    end_ns=$(date +%s%N)
    LAST_MS=$(( (end_ns - start_ns) / 1000000 ))
}

# compare_cold WORK OUT: compares upstream's answer with omnisym's (OUT) and records
# the differences' count, and their first lines, for compare.sh.
compare_cold() {
    local work=$1 out=$2 report count
    comparing && [ -z "${SKIP[upstream]:-}" ] || return 0
    report="$(python3 scripts/compare_answers.py "$out" "$(answer_path "$out" upstream)")"
    echo "$report"
    count="$(sed -n 's/^differences: //p' <<<"$report")"
    if [ "$count" != 0 ]; then
        record_note "$work" "answers differ in $count places: $(sed -n '2,4p' <<<"$report" \
            | sed 's/^ *//' | paste -sd ';' -)"
    fi
}

# answered NAME WORK ANSWER: whether post_timed's request to server NAME was answered
# (2xx). If not: omnisym's failure ends the script; another server's is printed, noted
# for compare.sh, and the server is left out from then on (SKIP).
answered() {
    [ "${LAST_CODE:0:1}" != 2 ] || return 0
    echo "cold request ($1): HTTP $LAST_CODE after $LAST_MS ms: $(head -c 500 "$3" 2>/dev/null)"
    [ "$1" != omnisym ] || die "omnisym did not answer the cold request"
    SKIP[$1]="HTTP $LAST_CODE to the cold request"
    record_note "$2" "$1 answered HTTP $LAST_CODE: $(head -c 200 "$3" 2>/dev/null | tr '\n\t' '  ')"
    return 1
}

# cold_request ENDPOINT BODY OUT: the first request to every server, which builds the
# caches; omnisym's answer goes to OUT, the others' beside it (answer_path). omnisym
# must answer; another server that does not is left out of the load (SKIP), said so.
# With two servers their answers are compared. WORK names the workload for compare.sh.
cold_request() {
    local endpoint=$1 body=$2 out=$3 name path
    for name in "${SERVERS[@]}"; do
        path="$(answer_path "$out" "$name")"
        post_timed "${URL_OF[$name]}$endpoint" "$body" "$path"
        answered "$name" "${WORK:-$endpoint}" "$path" || continue
        if comparing; then
            echo "cold request ($name): $LAST_MS ms, $(wc -c <"$path") response bytes"
        else
            echo "cold request: $LAST_MS ms, $(wc -c <"$path") response bytes"
        fi
    done
    compare_cold "${WORK:-$endpoint}" "$out"
}

# wrk_run URL ENDPOINT BODY OUT: one wrk run, its report indented; sets RPS_LAST.
wrk_run() {
    local summary non2xx
    OMNISYM_BODY="$3" wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency \
        -s "$LUA" "$1$2" >"$4"
    summary="$(grep '^LOADSUMMARY' "$4")" || { cat "$4"; die "wrk printed no summary"; }
    RPS_LAST="$(sed -n 's/.* rps=\([0-9.]*\).*/\1/p' <<<"$summary")"
    non2xx="$(sed -n 's/.* non2xx=\([0-9]*\).*/\1/p' <<<"$summary")"
    grep -v '^LOADSUMMARY' "$4" | sed 's/^/    /'
    echo "    ${summary#LOADSUMMARY }"
    [ "$non2xx" = 0 ] || echo "    WARNING: $non2xx responses were not 2xx" >&2
}

# server_log NAME: the server's warnings and errors, if any.
server_log() {
    local log="$TMP/$1/server.log"
    if grep -qv '^omnisym listening on' "$log"; then
        echo "$1 log (warnings and errors, last 20 lines):"
        grep -v '^omnisym listening on' "$log" | tail -n 20 | sed 's/^/    /'
    fi
}

# load_runs ENDPOINT BODY: RUNS wrk runs, then the median and the server's peak RSS.
# With upstream: ROUNDS rounds of one run per server, in turn, then each server's
# numbers, median, peak RSS and the ratios omnisym / upstream.
load_runs() {
    local endpoint=$1 body=$2 work="${WORK:-$1}" runs=$RUNS name run label hwm rss
    local -A rps_of=() median_of=() hwm_of=()
    comparing && runs=$ROUNDS
    local servers
    mapfile -t servers < <(active_servers)
    echo "load: wrk -t$THREADS -c$CONNECTIONS -d$DURATION --latency, $runs $(comparing && echo "rounds of ${servers[*]}" || echo runs)"
    echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
    for run in $(seq "$runs"); do
        for name in "${servers[@]}"; do
            wrk_run "${URL_OF[$name]}" "$endpoint" "$body" "$TMP/wrk-$name-$run.txt" \
                >"$TMP/wrk-$name-$run.report"
            label="run $run/$runs"
            comparing && label="round $run/$runs, $name"
            echo "--- $label: $RPS_LAST requests/s"
            cat "$TMP/wrk-$name-$run.report"
            rps_of[$name]+=" $RPS_LAST"
        done
    done
    echo "load average after:  $(cut -d' ' -f1-3 /proc/loadavg)"
    echo
    for name in "${servers[@]}"; do
        median_of[$name]="$(median ${rps_of[$name]})"
        hwm_of[$name]="$(peak_kb "$name")"
        rss="$(peak_kb "$name" VmRSS)"
        label=""
        comparing && label="$name "
        echo "${label}requests/s per $(comparing && echo round || echo run):${rps_of[$name]}"
        echo "${label}median requests/s:  ${median_of[$name]}"
        echo "${label:-server }peak RSS (VmHWM): $(mib "${hwm_of[$name]}") MiB (VmRSS now $(mib "$rss") MiB)"
        record "$work" "$name" "${median_of[$name]}" req/s "${hwm_of[$name]}"
        server_log "$name"
    done
    if comparing; then
        if [ -n "${SKIP[upstream]:-}" ]; then
            echo "upstream not loaded: ${SKIP[upstream]}"
            record "$work" upstream n/a req/s
        else
            echo "omnisym / upstream: requests/s $(ratio "${median_of[omnisym]}" "${median_of[upstream]}") (above 1: omnisym serves more)," \
                "peak RSS $(ratio "${hwm_of[omnisym]}" "${hwm_of[upstream]}")"
        fi
    fi
}

# wait_idle NAME: waits (up to 2 minutes) until server NAME has used no CPU for half
# a second: the work a request started in the background is then done.
wait_idle() {
    local stat="/proc/${PID_OF[$1]}/stat" last="" now
    for _ in $(seq 480); do
        now="$(awk '{print $14 + $15}' "$stat")"
        [ "$now" = "$last" ] && return 0
        last=$now
        sleep 0.5
    done
}

# cold_runs ENDPOINT BODY EXTRA_YAML SETTLE DESCRIBE: RUNS runs (with upstream: ROUNDS
# rounds of a run per server, in turn), each on a fresh server (start_one, so an empty
# cache): the time to the first answer to BODY; then `SETTLE NAME` waits until the work
# the request started is done and the server's peak RSS (VmHWM) is read. `DESCRIBE
# ANSWER` prints a few words on an answer. The medians per server at the end, with the
# ratios omnisym / upstream; the first round's answers are compared, and stay in
# $TMP/cold-1.json (omnisym's) and beside it (answer_path).
cold_runs() {
    local endpoint=$1 body=$2 extra=$3 settle=$4 describe=$5 work="${WORK:-cold $1}"
    local runs=$RUNS run name answer ms hwm label
    local -A times_of=() peaks_of=() median_of=() peak_of=()
    comparing && runs=$ROUNDS
    for run in $(seq "$runs"); do
        for name in $(active_servers); do
            start_one "$name" "$extra"
            answer="$(answer_path "$TMP/cold-$run.json" "$name")"
            post_timed "${URL_OF[$name]}$endpoint" "$body" "$answer"
            ms=$LAST_MS
            answered "$name" "$work" "$answer" || { stop_one "$name"; continue; }
            "$settle" "$name"
            hwm="$(peak_kb "$name")"
            stop_one "$name"
            label="run $run"
            comparing && label="round $run/$runs, $name"
            echo "$label: first answer $ms ms, $("$describe" "$answer"), peak RSS $(( hwm / 1024 )) MiB"
            times_of[$name]+=" $ms"
            peaks_of[$name]+=" $hwm"
        done
        [ "$run" != 1 ] || compare_cold "$work" "$TMP/cold-1.json"
    done
    for name in "${SERVERS[@]}"; do
        if [ -z "${times_of[$name]:-}" ]; then
            record "$work" "$name" n/a ms
            continue
        fi
        median_of[$name]="$(median ${times_of[$name]})"
        peak_of[$name]="$(median ${peaks_of[$name]})"
        label=""
        comparing && label="$name "
        echo "${label}median: first answer ${median_of[$name]} ms, peak RSS $(( ${peak_of[$name]%.*} / 1024 )) MiB"
        record "$work" "$name" "${median_of[$name]}" ms "${peak_of[$name]}"
    done
    if comparing && [ -n "${median_of[upstream]:-}" ]; then
        echo "omnisym / upstream: first answer $(ratio "${median_of[omnisym]}" "${median_of[upstream]}") (below 1: omnisym answers sooner)," \
            "peak RSS $(ratio "${peak_of[omnisym]}" "${peak_of[upstream]}")"
    fi
}

# js_body OUT URL DEBUG_ID FRAMES: a /symbolicate-js request for the frames in the file
# FRAMES (a JSON list) of the minified file at URL with DEBUG_ID, whose artifacts the
# Sentry stand-in (start_sentry) serves; with source context, innermost frame first.
js_body() {
    python3 - "$@" "$SENTRY_URL" <<'PY'
import json, sys
out, url, debug_id, frames, sentry = sys.argv[1:]
json.dump({
    "source": {"type": "sentry", "id": "sentry:project", "url": f"{sentry}/lookup", "token": "t"},
    "stacktraces": [{"frames": json.load(open(frames))}],
    "modules": [{"type": "sourcemap", "code_file": url, "debug_id": debug_id}],
    "options": {"apply_source_context": True, "frame_order": "callee_first"},
}, open(out, "w"))
PY
}

# start_sentry DIR: a stand-in for Sentry on a free loopback port (scripts/sentry-standin.py
# over DIR; sets SENTRY_URL): its artifact lookup, SENTRY_URL/lookup, answers with one
# artifact bundle, DIR/files/bundle.zip (the lookup file is written here), and its
# debug-file search, SENTRY_URL/difs/, serves DIR/difs/DEBUG_ID/TYPE. Stopped on exit.
start_sentry() {
    local port
    port="$(free_port)"
    SENTRY_URL="http://127.0.0.1:$port"
    mkdir -p "$1"
    printf '[{"type":"bundle","id":"1","url":"%s/files/bundle.zip","resolved_with":"debug-id"}]' \
        "$SENTRY_URL" >"$1/lookup"
    python3 scripts/sentry-standin.py "$1" "$port" >"$TMP/sentry.log" 2>&1 &
    EXTRA_PIDS+=($!)
    for _ in $(seq 100); do
        curl -fsS --max-time 1 -o /dev/null "$SENTRY_URL/lookup" 2>/dev/null && return 0
        sleep 0.1
    done
    cat "$TMP/sentry.log" >&2
    die "the Sentry stand-in did not start"
}
