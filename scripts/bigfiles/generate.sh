#!/usr/bin/env bash
# Debug files of a chosen size, for issue 45's bench and tests (not run by CI).
#
#   scripts/bigfiles/generate.sh SIZE OUTDIR [FORMAT...]
#
# SIZE: bytes, or with K/M/G (64M, 1G, 6G): each file reaches at least that size.
# FORMAT: elf-dwarf4 elf-dwarf5 elf-dwarf64 macho-fat pdb breakpad (default: all).
# Writes OUTDIR/FORMAT/... and beside each debug file FILE.truth.json: TRUTH_COUNT (1000)
# addresses inside functions with llvm-symbolizer-14's frames, inline chain included
# (llvm-19's for the PDB: LLVM 14's PDB reader misplaces nested inline call sites).
#
# How: gen_sources.py writes BF_TUS C++ files once; they are compiled once per target;
# the objects are then copied with their replica token renumbered (tools.py replicate)
# as many times as the size needs, and linked once. Only Debian's toolchains: gcc/g++ 12,
# clang-14, lld-14, llvm-14, binutils; dump_syms (cargo install, into DUMP_SYMS_ROOT) for
# breakpad. Same inputs give the same bytes: fixed seeds, fixed build paths
# (-ffile-prefix-map), /Brepro, fixed object mtimes for the Mach-O debug map.
#
# Disk: the replicated objects need about as much space as the output; they are deleted
# after each format. Knobs: BF_TUS (16), BF_FUNCS (150), BF_TYPES (300), BF_TYPES_DWARF64
# (1500), BF_SEED (45),
# TRUTH_COUNT (1000), TRUTH_SEED (4545), KEEP_WORK=1 keeps OUTDIR/.work.
set -euo pipefail

usage() { sed -n '2,9p' "$0" >&2; exit 2; }
[ $# -ge 2 ] || usage
SIZE_ARG=$1
OUT=$2
shift 2
FORMATS=("$@")
[ ${#FORMATS[@]} -gt 0 ] || FORMATS=(elf-dwarf4 elf-dwarf5 elf-dwarf64 macho-fat pdb breakpad)

case "$SIZE_ARG" in
    *[kK]) TARGET=$(( ${SIZE_ARG%?} * 1024 )) ;;
    *[mM]) TARGET=$(( ${SIZE_ARG%?} * 1024 * 1024 )) ;;
    *[gG]) TARGET=$(( ${SIZE_ARG%?} * 1024 * 1024 * 1024 )) ;;
    *[0-9]) TARGET=$SIZE_ARG ;;
    *) echo "generate.sh: size '$SIZE_ARG' is not bytes, K, M or G" >&2; exit 2 ;;
esac

HERE="$(cd "$(dirname "$0")" && pwd)"
LLVM_BIN=${LLVM_BIN:-/usr/lib/llvm-14/bin}
export LLVM_BIN
TUS=${BF_TUS:-16}
FUNCS=${BF_FUNCS:-150}
TYPES=${BF_TYPES:-300}
SEED=${BF_SEED:-45}
TRUTH_COUNT=${TRUTH_COUNT:-1000}
TRUTH_SEED=${TRUTH_SEED:-4545}
TOKEN=bfr000000
# Where the sources claim to live: the same in every build, whatever OUTDIR is.
SRC_PREFIX=/bigfiles/src
JOBS=${JOBS:-$(nproc)}
DUMP_SYMS_ROOT=${DUMP_SYMS_ROOT:-}
DUMP_SYMS_VERSION=2.3.9

for tool in gcc-12 g++-12 clang-14 ld.lld-14 lld-link-14 ld64.lld-14 objcopy python3; do
    command -v "$tool" >/dev/null || { echo "generate.sh: missing $tool (apt-get install gcc-12 g++-12 clang-14 lld-14 llvm-14 binutils python3)" >&2; exit 1; }
done
for tool in dsymutil llvm-symbolizer llvm-lipo llvm-objdump; do
    [ -x "$LLVM_BIN/$tool" ] || { echo "generate.sh: missing $LLVM_BIN/$tool (apt-get install llvm-14)" >&2; exit 1; }
done

mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
WORK="$OUT/.work"
rm -rf "$WORK"
mkdir -p "$WORK"
[ "${KEEP_WORK:-0}" = 1 ] || trap 'rm -rf "$WORK"' EXIT

now() { date +%s.%N; }
elapsed() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "$(now)"; }
fsize() { stat -c %s "$1"; }

python3 "$HERE/gen_sources.py" "$WORK/src" --tus "$TUS" --funcs "$FUNCS" --types "$TYPES" --seed "$SEED"
SRC_DIR="$WORK/src"

# compile NAME CC FLAGS...: every TU into $WORK/NAME/base/, start.cpp into $WORK/NAME/start.o.
# Paths stay relative and the build directory is renamed to SRC_PREFIX, so that no path
# of this machine reaches the output (clang also records its command line in CodeView).
compile() {
    local name=$1 cc=$2 map
    shift 2
    mkdir -p "$WORK/$name/base"
    case "$cc" in
        clang*) map=-ffile-compilation-dir="$SRC_PREFIX" ;;
        *) map=-ffile-prefix-map="$SRC_DIR=$SRC_PREFIX" ;;
    esac
    (
        cd "$SRC_DIR"
        printf '%s\n' "$TOKEN"/tu*.cpp | xargs -P "$JOBS" -I{} sh -c \
            'f={}; exec "$0" "$@" -c "$f" -o "../'"$name"'/base/$(basename "$f" .cpp).o"' \
            "$cc" "$map" -I"$TOKEN" "$@"
        "$cc" "$map" "$@" -c start.cpp -o "../$name/start.o"
    )
}

# replicas NAME COUNT: the objects of COUNT replicas, listed in $WORK/NAME/objs.rsp.
replicas() {
    rm -rf "$WORK/$1/rep"
    python3 "$HERE/tools.py" replicate "$TOKEN" "$2" "$WORK/$1/base" "$WORK/$1/rep" > "$WORK/$1/objs.rsp"
    # ld64's debug map records each object's mtime and dsymutil checks it: fix it.
    find "$WORK/$1/rep" "$WORK/$1/start.o" -name '*.o' -exec touch -h -d @1000000000 {} +
}

# sized NAME LINK MEASURE: link 1 and 2 replicas to learn a replica's share of the size,
# then link as many as TARGET needs (LINK COUNT links COUNT replicas; MEASURE prints
# the size of what it made). Prints the count used.
sized() {
    local name=$1 link=$2 measure=$3 s1 s2 per count size
    replicas "$name" 1; "$link" 1 >&2; s1=$("$measure")
    replicas "$name" 2; "$link" 2 >&2; s2=$("$measure")
    per=$(( s2 - s1 ))
    [ "$per" -gt 0 ] || { echo "generate.sh: $name does not grow with replicas" >&2; exit 1; }
    count=$(( (TARGET - s1 + per - 1) / per + 1 ))
    [ "$count" -ge 1 ] || count=1
    while :; do
        replicas "$name" "$count"; "$link" "$count" >&2; size=$("$measure")
        [ "$size" -lt "$TARGET" ] || break
        count=$(( count + (TARGET - size + per - 1) / per ))
    done
    rm -rf "$WORK/$name/rep"
    echo "$count"
}

report() { # FORMAT FILE COUNT START
    printf 'generate.sh: %-11s %s: %s bytes, %s replicas of %s TUs, %s s\n' "$1" "$2" "$(fsize "$2")" "$3" "$TUS" "$(elapsed "$4")" >&2
}

CXXFLAGS_BASE=(-O2 -g -fno-exceptions -fno-rtti -fno-stack-protector -ffreestanding)
# The generated types have no code: kept, they make .debug_info the bulk of the file.
CXXFLAGS_COMMON=("${CXXFLAGS_BASE[@]}" -fno-eliminate-unused-debug-types)

# begin FORMAT: the clock and output folder (DIR) of one format.
begin() {
    START=$(now)
    DIR="$OUT/$1"
    mkdir -p "$DIR"
}

# --- ELF: gcc 12, linked by ld.bfd as a static PIE with its own _start ---
elf() {
    local fmt=$1 count
    shift
    begin "$fmt"
    compile "$fmt" g++-12 "${CXXFLAGS_COMMON[@]}" "$@"
    ELF_FMT=$fmt
    ELF_OUT="$DIR/bigfile"
    count=$(sized "$fmt" link_elf measure_elf)
    python3 "$HERE/tools.py" truth "$ELF_OUT" "$fmt" "$TRUTH_SEED" "$TRUTH_COUNT" "$ELF_OUT.truth.json" "x86_64:$ELF_OUT:$ELF_OUT"
    report "$fmt" "$ELF_OUT" "$count" "$START"
}
link_elf() {
    # DWARF32 offsets are 32-bit relocations: past 4 GiB of one section ld reports
    # "relocation truncated to fit"; elf-dwarf64 is the format for that.
    g++-12 -static-pie -nostdlib -Wl,--build-id=sha1 -Wl,-e,_start -o "$ELF_OUT" \
        "$WORK/$ELF_FMT/start.o" @"$WORK/$ELF_FMT/objs.rsp"
}
measure_elf() { fsize "$ELF_OUT"; }

# --- Mach-O: clang-14 per arch, ld64.lld-14, dsymutil, then one fat dSYM ---
macho() {
    local fmt=macho-fat arch count thins=() slices=()
    begin "$fmt"
    mkdir -p "$DIR/bigfile.dSYM/Contents/Resources/DWARF"
    for arch in x86_64 arm64; do
        compile "$fmt-$arch" clang-14 -target "$arch-apple-macos11" "${CXXFLAGS_COMMON[@]}" -Wno-stdlibcxx-not-found
    done
    # Half of the size per arch: the fat file holds both.
    local whole=$TARGET
    TARGET=$(( (whole + 1) / 2 ))
    for arch in x86_64 arm64; do
        MACHO_NAME="$fmt-$arch"
        MACHO_ARCH=$arch
        count=$(sized "$MACHO_NAME" link_macho measure_macho)
        thins+=("$WORK/$MACHO_NAME/bigfile.dwarf")
        slices+=("$arch:$WORK/$MACHO_NAME/bigfile:$WORK/$MACHO_NAME/bigfile.dwarf")
        # The truth needs this arch's binary and DWARF; keep both until then.
        cp "$WORK/$MACHO_NAME/bigfile.dSYM/Contents/Resources/DWARF/bigfile" "$WORK/$MACHO_NAME/bigfile.dwarf"
        rm -rf "$WORK/$MACHO_NAME/bigfile.dSYM"
    done
    TARGET=$whole
    local fat="$DIR/bigfile.dSYM/Contents/Resources/DWARF/bigfile" total=0 t
    for t in "${thins[@]}"; do total=$(( total + $(fsize "$t") )); done
    if [ "$total" -lt $(( (1 << 32) - (1 << 20) )) ]; then
        "$LLVM_BIN/llvm-lipo" -create "${thins[@]}" -output "$fat"
    else
        # llvm-lipo 14 has no -fat64: past 4 GiB a 32-bit fat_arch cannot hold the offsets.
        python3 "$HERE/tools.py" fat64 "$fat" "${thins[@]}"
    fi
    python3 "$HERE/tools.py" truth "$fat" "$fmt" "$TRUTH_SEED" "$TRUTH_COUNT" "$fat.truth.json" "${slices[@]}"
    rm -f "${thins[@]}"
    report "$fmt" "$fat" "$count (arm64)" "$START"
}
link_macho() {
    (
        # Relative object paths in the debug map: dsymutil runs from here too.
        cd "$WORK/$MACHO_NAME"
        sed "s|^$WORK/$MACHO_NAME/||" objs.rsp > objs.rel.rsp
        ld64.lld-14 -arch "$MACHO_ARCH" -platform_version macos 11.0 11.0 -e __start \
            -oso_prefix "$WORK/$MACHO_NAME/" -o bigfile start.o @objs.rel.rsp
        rm -rf bigfile.dSYM
        "$LLVM_BIN/dsymutil" bigfile -o bigfile.dSYM
    )
}
measure_macho() { fsize "$WORK/$MACHO_NAME/bigfile.dSYM/Contents/Resources/DWARF/bigfile"; }

# --- PDB: clang-14 CodeView objects, lld-link-14 /DEBUG; the PE is kept too ---
pdb() {
    local fmt=pdb count
    begin "$fmt"
    compile "$fmt" clang-14 --target=x86_64-pc-windows-msvc -gcodeview "${CXXFLAGS_COMMON[@]}" -Wno-stdlibcxx-not-found
    PDB_DIR=$DIR
    count=$(sized "$fmt" link_pdb measure_pdb)
    python3 "$HERE/tools.py" truth "$DIR/bigfile.pdb" "$fmt" "$TRUTH_SEED" "$TRUTH_COUNT" "$DIR/bigfile.pdb.truth.json" "x86_64:$DIR/bigfile.exe:$DIR/bigfile.pdb"
    report "$fmt" "$DIR/bigfile.pdb" "$count" "$START"
}
link_pdb() {
    (
        cd "$WORK/pdb"
        sed "s|^$WORK/pdb/||" objs.rsp > objs.rel.rsp
        # 8 KiB pages: a PDB of 4 KiB pages cannot pass 4 GiB.
        lld-link-14 /nologo /nodefaultlib /entry:_start /subsystem:console /debug /Brepro \
            /pdbpagesize:8192 /pdbaltpath:%_PDB% /pdbsourcepath:/bigfiles/obj /out:bigfile.exe /pdb:bigfile.pdb \
            start.o @objs.rel.rsp
    )
    # Linked here under relative names: the PDB records the linker's command line.
    mv "$WORK/pdb/bigfile.exe" "$WORK/pdb/bigfile.pdb" "$PDB_DIR/"
}
measure_pdb() { fsize "$PDB_DIR/bigfile.pdb"; }

# --- Breakpad: dump_syms --inlines of an ELF (DWARF 5) sized so the .sym reaches SIZE ---
breakpad() {
    local fmt=breakpad count
    begin "$fmt"
    DUMP_SYMS=$(command -v dump_syms || true)
    [ -n "$DUMP_SYMS" ] || DUMP_SYMS="${DUMP_SYMS_ROOT:+$DUMP_SYMS_ROOT/bin/}dump_syms"
    if ! [ -x "$DUMP_SYMS" ]; then
        echo "generate.sh: dump_syms not found; install it with" >&2
        echo "  cargo install dump_syms --version $DUMP_SYMS_VERSION --locked --root DIR   and set DUMP_SYMS_ROOT=DIR" >&2
        exit 1
    fi
    # Without the code-less types, which no .sym keeps: the ELF to dump stays smaller.
    compile "$fmt" g++-12 "${CXXFLAGS_BASE[@]}" -gdwarf-5
    ELF_FMT=$fmt
    ELF_OUT="$WORK/$fmt/bigfile"
    BP_OUT="$DIR/bigfile.sym"
    count=$(sized "$fmt" link_breakpad measure_breakpad)
    python3 "$HERE/tools.py" truth "$BP_OUT" "$fmt" "$TRUTH_SEED" "$TRUTH_COUNT" "$BP_OUT.truth.json" "x86_64:$ELF_OUT:$ELF_OUT"
    rm -f "$ELF_OUT"
    report "$fmt" "$BP_OUT" "$count" "$START"
}
link_breakpad() { link_elf && "$DUMP_SYMS" --inlines "$ELF_OUT" > "$BP_OUT"; }
measure_breakpad() { fsize "$BP_OUT"; }

for fmt in "${FORMATS[@]}"; do
    case "$fmt" in
        elf-dwarf4) elf "$fmt" -gdwarf-4 ;;
        elf-dwarf5) elf "$fmt" -gdwarf-5 ;;
        elf-dwarf64)
            # Many types of shared member names: .debug_info is most of the file, and so
            # passes 4 GiB from a file of about 5 GiB on.
            python3 "$HERE/gen_sources.py" "$WORK/src64" --tus "$TUS" --funcs "$FUNCS" \
                --types "${BF_TYPES_DWARF64:-1500}" --short-members --seed "$SEED"
            SRC_DIR="$WORK/src64" elf "$fmt" -gdwarf-5 -gdwarf64
            ;;
        macho-fat) macho ;;
        pdb) pdb ;;
        breakpad) breakpad ;;
        *) echo "generate.sh: unknown format $fmt" >&2; exit 2 ;;
    esac
done
