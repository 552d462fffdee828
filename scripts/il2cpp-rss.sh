#!/usr/bin/env bash
# Measures what reading a large il2cpp line mapping costs the server: writes a mapping
# of about 44 MiB (the fixture's own lines for its C++ file, then generated C++ files
# of generated lines), puts it beside the il2cpp fixture's debug file in a unified
# directory, starts the server, symbolicates the fixture's frames once, and prints the
# server's resident memory before and after and its peak (VmHWM), in MB, and whether
# the frames came back in C#.
#
# Usage: scripts/il2cpp-rss.sh [OMNISYM_BINARY] [MAPPING_MIB]
# (default: target/debug/omnisym, 44). Linux only (reads /proc). Its output is not
# committed; the numbers it gave are in CHANGELOG.md.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${1:-$root/target/debug/omnisym}"
mib="${2:-44}"
fixture="$root/fixtures/il2cpp"

work="$(mktemp -d)"
pid=""
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

code_id="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["code_id"])' "$fixture/manifest.json")"
dir="$work/symbols/${code_id:0:2}/${code_id:2}"
mkdir -p "$dir"
cp "$fixture/game.debug" "$dir/debuginfo"

python3 - "$fixture/LineNumberMapping.json" "$dir/il2cpp" "$mib" <<'PY'
import json, sys
src, dest, mib = sys.argv[1], sys.argv[2], int(sys.argv[3])
mapping = json.load(open(src))
target = mib << 20
with open(dest, "w") as out:
    out.write("{")
    first = json.dumps(mapping)[1:-1]
    out.write(first)
    size = len(first) + 1
    n = 0
    while size < target:
        lines = ", ".join(f'"{l}": {l // 3 + 1}' for l in range(10, 30010, 3))
        entry = (f', "/build/il2cppOutput/Generated_{n}.cpp": '
                 f'{{"Assets/Scripts/Generated{n % 500}.cs": {{{lines}}}}}')
        out.write(entry)
        size += len(entry)
        n += 1
    out.write("}")
PY
mapping_bytes="$(stat -c %s "$dir/il2cpp")"

port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
cat > "$work/config.yml" <<YAML
bind: 127.0.0.1:$port
cache_dir: $work/cache
logging:
  level: warn
YAML
"$bin" run -c "$work/config.yml" >"$work/server.log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$port/healthcheck" >/dev/null && break
  sleep 0.1
done

mb() { awk -v key="$1:" '$1 == key { printf "%.0f", $2 / 1024 }' "/proc/$pid/status"; }
rss_before="$(mb VmRSS)"

python3 - "$fixture/manifest.json" "$work/symbols" > "$work/request.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
print(json.dumps({
    "sources": [{"type": "filesystem", "id": "game", "path": sys.argv[2],
                 "layout": {"type": "unified"}}],
    "modules": [{"type": "elf", "code_id": m["code_id"], "debug_id": m["debug_id"],
                 "code_file": "libil2cpp.so", "image_addr": m["image_addr"],
                 "image_size": m["image_size"]}],
    "stacktraces": [{"frames": [{"instruction_addr": f["addr"]} for f in m["frames"]]}],
}))
PY
answer="$(curl -sf -H 'content-type: application/json' --data @"$work/request.json" \
  "http://127.0.0.1:$port/symbolicate")"
files="$(printf '%s' "$answer" | python3 -c 'import json,sys; print(" ".join(sorted({f.get("abs_path","?") for f in json.load(sys.stdin)["stacktraces"][0]["frames"]})))')"

echo "mapping: $mapping_bytes bytes"
echo "RSS before: ${rss_before} MB, after: $(mb VmRSS) MB, peak: $(mb VmHWM) MB"
echo "frames answered in: $files"
