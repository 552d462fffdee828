#!/usr/bin/env bash
# Load check of POST /minidump on the release build, with the fixtures of
# fixtures/minidump (see its README) as a filesystem source:
#   1. one cold request (fetches and converts the symbols),
#   2. N sequential warm requests: median and p90 latency,
#   3. C requests at once: wall time, and the server's peak RSS (VmHWM, reset just before).
# Usage: scripts/minidump-load.sh            (N=200 C=50 VARIANT=nofp by default)
#        N=500 C=100 VARIANT=fp scripts/minidump-load.sh
# Needs: cargo, python3 (stdlib only), Linux /proc. Run it on a quiet machine.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export N="${N:-200}" C="${C:-50}" VARIANT="${VARIANT:-nofp}"

cargo build --release --quiet --bin omnisym
TARGET_DIR="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
export OMNISYM_BIN="$TARGET_DIR/release/omnisym"

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export WORK

python3 - <<'EOF'
import json, os, shutil, statistics, subprocess, sys, threading, time, urllib.request

ROOT = os.getcwd()
WORK = os.environ["WORK"]
N, C, VARIANT = int(os.environ["N"]), int(os.environ["C"]), os.environ["VARIANT"]
FIX = os.path.join(ROOT, "fixtures", "minidump")
manifest = json.load(open(os.path.join(FIX, "manifest.json")))
v = manifest["variants"][VARIANT]

# The native layout: <code_id[:2]>/<code_id[2:]>{,.debug,.src.zip}
symbols = os.path.join(WORK, "symbols")
gdb = os.path.join(symbols, v["code_id"][:2], v["code_id"][2:])
os.makedirs(os.path.dirname(gdb))
for kind, suffix in (("executable", ""), ("debug", ".debug"), ("source_bundle", ".src.zip")):
    shutil.copy(os.path.join(FIX, v["files"][kind]), gdb + suffix)
dump = open(os.path.join(FIX, v["files"]["minidump"]), "rb").read()

config = os.path.join(WORK, "config.yml")
with open(config, "w") as f:
    f.write("bind: 127.0.0.1:0\ncache_dir: %s\nmax_concurrent_requests: %d\n"
            % (os.path.join(WORK, "cache"), max(200, 2 * C)))
server = subprocess.Popen([os.environ["OMNISYM_BIN"], "run", "--config", config],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          env=dict(os.environ, RUST_LOG="warn"))
url = None
start = time.time()
while url is None:
    line = server.stderr.readline()
    if not line:
        sys.exit("omnisym exited before listening (%s)" % server.poll())
    if line.startswith("omnisym listening on "):
        url = line.split()[-1].strip()
threading.Thread(target=lambda: [None for _ in server.stderr], daemon=True).start()

boundary = "----omnisym-load-7b1e"
def field(name, data, filename=None):
    head = '--%s\r\nContent-Disposition: form-data; name="%s"' % (boundary, name)
    if filename:
        head += '; filename="%s"\r\nContent-Type: application/octet-stream' % filename
    return head.encode() + b"\r\n\r\n" + data + b"\r\n"
body = (field("upload_file_minidump", dump, "crash.dmp")
        + field("sources", json.dumps([{"type": "filesystem", "id": "fixtures",
                                         "path": symbols, "layout": {"type": "native"}}]).encode())
        + field("options", b"{}")
        + ("--%s--\r\n" % boundary).encode())
want_function = v["frames"][0]["function"]

def post():
    req = urllib.request.Request(url + "/minidump", data=body, method="POST",
                                 headers={"Content-Type": "multipart/form-data; boundary=" + boundary})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=120) as resp:
        answer = json.load(resp)
    ms = (time.perf_counter() - t0) * 1000
    if answer.get("status") != "completed":
        raise SystemExit("request failed: %s" % json.dumps(answer)[:500])
    thread = [t for t in answer["stacktraces"] if t.get("is_requesting")][0]
    if thread["frames"][0].get("function") != want_function:
        raise SystemExit("unexpected answer: %s" % json.dumps(thread["frames"][:2]))
    return ms

def status(field):
    for line in open("/proc/%d/status" % server.pid):
        if line.startswith(field + ":"):
            return int(line.split()[1])  # kB

try:
    print("omnisym %s, variant %s (%d byte dump), pid %d" % (url, VARIANT, len(dump), server.pid))
    print("cold request:            %8.1f ms" % post())
    post()  # one more warm-up
    lat = sorted(post() for _ in range(N))
    p90 = lat[min(len(lat) - 1, int(round(0.9 * len(lat))) - 1)]
    print("warm, %d sequential:    median %6.1f ms   p90 %6.1f ms   max %6.1f ms"
          % (N, statistics.median(lat), p90, lat[-1]))

    rss_before = status("VmRSS")
    with open("/proc/%d/clear_refs" % server.pid, "w") as f:
        f.write("5")  # resets VmHWM to the current RSS
    results, errors = [], []
    def worker():
        try:
            results.append(post())
        except BaseException as e:  # noqa
            errors.append(repr(e))
    threads = [threading.Thread(target=worker) for _ in range(C)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = (time.perf_counter() - t0) * 1000
    if errors:
        raise SystemExit("%d of %d concurrent requests failed: %s" % (len(errors), C, errors[:3]))
    results.sort()
    print("%d concurrent:           wall %6.1f ms   median %6.1f ms   max %6.1f ms"
          % (C, wall, statistics.median(results), results[-1]))
    print("server RSS: %.1f MiB before, peak (VmHWM) %.1f MiB during the %d concurrent requests"
          % (rss_before / 1024, status("VmHWM") / 1024, C))
finally:
    server.terminate()
    server.wait(timeout=10)
EOF
