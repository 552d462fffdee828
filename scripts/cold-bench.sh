#!/usr/bin/env bash
# Cold `POST /symbolicate` on a large DWARF file: time to the first answer, and the
# server's peak RSS until its background SymCache conversion is done.
#
# The large file is this project's own release build with `debug = 1` (line tables
# and inline info: a real Rust service's release debug file), built into
# target/cold-bench-large unless LARGE names a file. It is put behind a filesystem
# source in the native layout, and one request asks for ADDRS (50) random addresses
# inside its functions (fixed seed, symbols from `nm`). Each of RUNS (3) runs starts
# the server BIN (default: `cargo build --release`'s) on an empty cache, times the
# request, waits until the SymCache is on disk (the conversion then has peaked), and
# reads the server's VmHWM. omnisym starts no other processes, so that is the whole
# peak. Medians at the end. Runs `examples/lazy_check` on the same file when
# CHECK=1: lazy reader vs whole SymCache, address by address.
#
#   scripts/cold-bench.sh                       # this tree's server
#   BIN=/path/to/old/omnisym scripts/cold-bench.sh   # another build, same file
#   RESPONSE_OUT=answer.json ...                     # keep the first run's answer
#   UPSTREAM_BIN=/path/to/symbolicator scripts/cold-bench.sh   # and upstream's, alternating
#
# With UPSTREAM_BIN (a build of upstream Symbolicator, see scripts/load-common.sh), each
# of ROUNDS (3) rounds runs omnisym and then upstream the same way, each on its own
# empty cache; the first round's answers are compared, and the medians per server come
# with the ratios omnisym / upstream. Upstream answers once its SymCache is written, so
# its peak is read the same way.
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS="${RUNS:-3}"
ADDRS="${ADDRS:-50}"

. scripts/load-common.sh
ensure_pkg nm binutils
ensure_pkg readelf binutils

if [ -z "${LARGE:-}" ]; then
    CARGO_PROFILE_RELEASE_DEBUG=1 cargo build --release --locked --bin omnisym \
        --target-dir target/cold-bench-large
    LARGE=target/cold-bench-large/release/omnisym
fi
[ -f "$LARGE" ] || die "no large file at $LARGE"
echo "large file: $LARGE ($(( $(stat -c %s "$LARGE") / 1048576 )) MiB)"
WORK="${WORK:-cold /symbolicate, $(file_mib "$LARGE") MiB DWARF ELF}"
echo "server: $BIN"

# The request: ids from the build-id note, addresses inside sized function symbols,
# relative to the first PT_LOAD (symbolic's image-relative addresses).
python3 - "$LARGE" "$TMP" "$ADDRS" <<'EOF'
import json, os, random, re, subprocess, sys
large, tmp, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
notes = subprocess.run(["readelf", "-n", large], capture_output=True, text=True).stdout
build_id = re.search(r"Build ID: ([0-9a-f]+)", notes).group(1)
b = bytes.fromhex(build_id)[:16].ljust(16, b"\0")
guid = b[3::-1] + b[5:3:-1] + b[7:5:-1] + b[8:]
debug_id = "%s-%s-%s-%s-%s" % tuple(guid.hex()[a:z] for a, z in ((0,8),(8,12),(12,16),(16,20),(20,32)))
phdrs = subprocess.run(["readelf", "-lW", large], capture_output=True, text=True).stdout
load = int(re.search(r"^\s*LOAD\s+\S+\s+(0x[0-9a-f]+)", phdrs, re.M).group(1), 16)
syms = []
for line in subprocess.run(["nm", "-S", "--defined-only", large], capture_output=True, text=True).stdout.splitlines():
    parts = line.split()
    if len(parts) == 4 and parts[2] in "tT" and int(parts[1], 16) > 0:
        syms.append((int(parts[0], 16), int(parts[1], 16)))
rng = random.Random(50)
image = 0x5555_0000_0000
frames = []
for addr, size in rng.sample(syms, count):
    frames.append({"instruction_addr": hex(image + addr - load + rng.randrange(size))})
dest = os.path.join(tmp, "symbols", build_id[:2], build_id[2:] + ".debug")
os.makedirs(os.path.dirname(dest))
os.link(os.path.abspath(large), dest) if os.stat(large).st_dev == os.stat(tmp).st_dev else __import__("shutil").copyfile(large, dest)
body = {
    "sources": [{"type": "filesystem", "id": "large", "path": os.path.join(tmp, "symbols")}],
    "modules": [{"type": "elf", "debug_id": debug_id, "code_id": build_id,
                 "code_file": "/usr/bin/omnisym", "image_addr": hex(image),
                 "image_size": os.stat(large).st_size}],
    "stacktraces": [{"frames": frames}],
}
json.dump(body, open(os.path.join(tmp, "body.json"), "w"))
print(f"request: {count} addresses in {len(syms)} function symbols, debug_id {debug_id}")
EOF

# The conversion may still run (omnisym answers cold requests before it ends): the
# peak is read once the SymCache is on disk.
symcache_written() {
    for _ in $(seq 1200); do
        find "$TMP/$1/cache" -path '*symcaches*' -type f ! -name '.tmp*' -size +1k 2>/dev/null | grep -q . && break
        sleep 0.25
    done
    sleep 0.5
}
frames_with_lines() {
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(sum(1 for f in r["stacktraces"][0]["frames"] if f.get("status")=="symbolicated" and f.get("lineno")), "frames with lines")' "$1"
}

cold_runs /symbolicate "$TMP/body.json" "" symcache_written frames_with_lines
# RESPONSE_OUT keeps the first run's answer, to compare two builds' answers.
if [ -n "${RESPONSE_OUT:-}" ]; then cp "$TMP/cold-1.json" "$RESPONSE_OUT"; fi

if [ "${CHECK:-0}" = 1 ]; then
    cargo run --release --locked --example lazy_check -- "$LARGE" --addrs "$ADDRS" --compare 20000
fi
