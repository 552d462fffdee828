#!/usr/bin/env bash
# Builds the fuzz targets, then runs each for SECONDS (default 60) and writes every
# target's final libFuzzer stats line (`#N DONE cov: ... exec/s: ...`), or what stopped
# it, into $FUZZ_WORK/summary.txt.
#
#   fuzz/run.sh SECONDS [TARGET...]      default: every target, one after another
#
# Environment:
#   FUZZ_JOBS=2          run two targets at a time (the machine's cores permitting)
#   FUZZ_RSS_MB=2048     -rss_limit_mb (also the largest single allocation)
#   FUZZ_TIMEOUT=25      -timeout: seconds one input may take
#   FUZZ_WORK=fuzz/work  grown corpora, logs and the summary (not committed)
#   FUZZ_SANITIZER=address   or `none` for faster runs without AddressSanitizer
#   CARGO_TARGET_DIR     where the fuzz build goes (default fuzz/target)
#   OMNISYM_FUZZ_STRICT=1    panics caught by `isolate` count as crashes too
#
# Nightly features come from the stable toolchain with RUSTC_BOOTSTRAP=1. The seeds in
# fuzz/corpus/<target> are read, never written: new inputs go to $FUZZ_WORK/<target>.
# Crashes land in fuzz/artifacts/<target>/, panics that `isolate` contained in
# fuzz/caught/<target>/.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
shift || true
jobs=${FUZZ_JOBS:-1}
rss_mb=${FUZZ_RSS_MB:-2048}
timeout=${FUZZ_TIMEOUT:-25}
work=${FUZZ_WORK:-fuzz/work}
sanitizer=${FUZZ_SANITIZER:-address}
target_dir=${CARGO_TARGET_DIR:-fuzz/target}
export RUSTC_BOOTSTRAP=1

build_flags=(-O -a --codegen-units 16 -s "$sanitizer" --target-dir "$target_dir")
if [ $# -gt 0 ]; then
  targets=("$@")
else
  mapfile -t targets < <(cargo fuzz list)
fi

started=$(date +%s)
if [ $# -gt 0 ]; then
  for target in "${targets[@]}"; do
    cargo fuzz build "${build_flags[@]}" "$target"
  done
else
  cargo fuzz build "${build_flags[@]}"
fi
echo "build: $(( $(date +%s) - started )) s"

bin_dir="$target_dir/$(rustc -vV | sed -n 's/^host: //p')/release"
mkdir -p "$work"
summary="$work/summary.txt"

run_one() {
  local target=$1
  local corpus="$work/$target"
  local log="$work/$target.log"
  mkdir -p "$corpus" "fuzz/artifacts/$target"
  local status=0
  "$bin_dir/$target" "$corpus" "fuzz/corpus/$target" \
    -artifact_prefix="fuzz/artifacts/$target/" \
    -max_total_time="$seconds" -rss_limit_mb="$rss_mb" -timeout="$timeout" \
    -print_final_stats=1 >"$log" 2>&1 || status=$?
  local line
  line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -n 1 || true)
  if [ -z "$line" ]; then
    line="STOPPED (exit $status): $(grep -E 'Test unit written to|ERROR: libFuzzer|==omnisym-fuzz==|SUMMARY' "$log" | tail -n 2 | tr '\n' ' ')"
  fi
  printf '%-20s %s\n' "$target" "$line"
}
export -f run_one
export work seconds rss_mb timeout bin_dir

{
  echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ), ${seconds}s per target, sanitizer $sanitizer, $(git rev-parse --short HEAD)"
  printf '%s\n' "${targets[@]}" | xargs -P "$jobs" -I{} bash -c 'run_one "$1"' _ {}
} | tee "$summary"
