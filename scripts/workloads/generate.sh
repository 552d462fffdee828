#!/usr/bin/env bash
# Generates one native /symbolicate workload from a real program: builds it with this
# machine's Debian compilers (g++ 12) or rustc, runs it under gdb (batch mode, ASLR off)
# to its deliberate crash, and writes to OUTDIR:
#   symbols/   the debug files of the modules built here, in the `native` layout
#              (<code_id[0:2]>/<code_id[2:]>.debug); the system libraries' are left out,
#              so their frames come back without symbols, as for a user without them;
#   body.json  the /symbolicate request: every mapped ELF object as a module (code_id,
#              debug_id, image_addr, image_size from the process's mappings) and every
#              thread's frames as gdb saw them, innermost first, with a filesystem
#              source over symbols/;
#   expect.json what the answer must show (scripts/load.sh checks it): each input
#              frame's module and whether it has symbols, and gdb's frames with inlinees.
#
#   scripts/workloads/generate.sh OUTDIR WORKLOAD
#
# Workloads:
#   cxx-o2, cxx-o3   C++ (native/main.cpp) at -O2 / -O3: templates, lambdas, std
#                    containers, forced inlining; 2 threads, about 40 frames; libc and
#                    libstdc++ without symbols
#   rust-legacy      Rust release build with debug info, legacy mangling (the default)
#   rust-v0          the same with `-C symbol-mangling-version=v0`; libc without symbols
#   large            8 threads of about 60 frames over 6 modules: the executable and two
#                    shared libraries built here (native/lib.cpp), and libc, libstdc++
#                    and libgcc_s without symbols
#
# The build paths are mapped to /src/workloads and the program is run with ASLR off, so
# the same toolchain gives the same body. The script exits non-zero when the program
# does not stop where it should or the body does not check out (generate.py).
set -euo pipefail

[ $# -eq 2 ] || { echo "usage: $0 OUTDIR WORKLOAD" >&2; exit 2; }
HERE="$(cd "$(dirname "$0")" && pwd)"
WORKLOAD=$2
mkdir -p "$1"
OUT="$(cd "$1" && pwd)"
BUILD="$OUT/build"
rm -rf "$BUILD" "$OUT/symbols"
mkdir -p "$BUILD"

need() {
    command -v "$1" >/dev/null || { echo "$0: needs $1 (Debian package $2)" >&2; exit 1; }
}
need gdb gdb
need readelf binutils
need objcopy binutils

# Debug info names sources and build dirs by these, not by the temp dirs.
PREFIX_MAPS=(-ffile-prefix-map="$HERE"=/src/workloads -ffile-prefix-map="$BUILD"=/build)
CXXFLAGS=(-std=c++17 -g -pthread -Wall -Wextra "${PREFIX_MAPS[@]}")

# The input frames a thread may have: the bounds generate.py checks.
case "$WORKLOAD" in
cxx-o2 | cxx-o3)
    need g++-12 g++-12
    (cd "$BUILD" && g++-12 "${CXXFLAGS[@]}" "-O${WORKLOAD#cxx-o}" -DWL_NS=wl_exe -DWL_THREADS=2 \
        -DWL_DEPTH_MIN=2 -DWL_DEPTH_SPAN=3 "$HERE/native/main.cpp" -o crash)
    SHAPE=(--threads 2 --frames 15:30 --built crash)
    ;;
rust-legacy | rust-v0)
    need rustc rustc
    mangling=()
    # legacy is rustc's default; naming it needs -Z unstable-options, v0 is stable.
    [ "$WORKLOAD" = rust-v0 ] && mangling=(-C symbol-mangling-version=v0)
    (cd "$BUILD" && rustc --edition 2021 -C opt-level=3 -C debuginfo=2 -C codegen-units=1 \
        "${mangling[@]}" --remap-path-prefix="$HERE"=/src/workloads \
        --remap-path-prefix="$BUILD"=/build "$HERE/rust/crash.rs" -o crash)
    SHAPE=(--threads 2 --frames 15:30 --built crash)
    ;;
large)
    need g++-12 g++-12
    for lib in a b; do
        (cd "$BUILD" && g++-12 "${CXXFLAGS[@]}" -O2 -fPIC -shared -fvisibility=hidden \
            -fvisibility-inlines-hidden -DWL_NS="wl_$lib" -DWL_FLAT -DWL_DEPTH_MIN=2 -DWL_DEPTH_SPAN=4 \
            -Wl,-soname,"libwl_$lib.so" "$HERE/native/lib.cpp" -o "libwl_$lib.so")
    done
    # libgcc_s is linked explicitly: _Unwind_Backtrace is the frame it contributes.
    (cd "$BUILD" && g++-12 "${CXXFLAGS[@]}" -O2 -DWL_NS=wl_exe -DWL_THREADS=8 -DWL_LARGE -DWL_FLAT \
        -DWL_DEPTH_MIN=2 -DWL_DEPTH_SPAN=4 "$HERE/native/main.cpp" -o crash \
        -L. -lwl_a -lwl_b -Wl,--no-as-needed -lgcc_s -Wl,-rpath,'$ORIGIN')
    SHAPE=(--threads 8 --frames 45:75 --built crash --built libwl_a.so --built libwl_b.so
        --without libc.so.6 --without libstdc++.so.6 --without libgcc_s.so.1)
    ;;
*)
    echo "$0: unknown workload $WORKLOAD (cxx-o2, cxx-o3, rust-legacy, rust-v0, large)" >&2
    exit 2
    ;;
esac

# gdb runs the program to its crash; its own output is kept for when that goes wrong.
if ! WL_STOP_OUT="$BUILD/stop.json" timeout 120 gdb -batch -nx -x "$HERE/gdb_stop.py" \
    --args "$BUILD/crash" >"$BUILD/gdb.log" 2>&1 || [ ! -s "$BUILD/stop.json" ]; then
    cat "$BUILD/gdb.log" >&2
    echo "$0: $WORKLOAD: gdb did not record the stop" >&2
    exit 1
fi

python3 "$HERE/generate.py" --workload "$WORKLOAD" --build "$BUILD" --out "$OUT" "${SHAPE[@]}"
