#!/usr/bin/env bash
# Load check of POST /minidump on the release build, with the fixtures of
# fixtures/minidump (see its README) as a filesystem source:
#   1. one cold request (fetches and converts the symbols),
#   2. N sequential warm requests: median and p90 latency,
#   3. C requests at once: wall time, and the server's peak RSS (VmHWM, reset just before).
# Usage: scripts/minidump-load.sh            (N=200 C=50 VARIANT=nofp by default)
#        N=500 C=100 VARIANT=fp scripts/minidump-load.sh
#        VARIANT=all scripts/minidump-load.sh   (every dump of the manifest, one at a time)
# With UPSTREAM_BIN (a build of upstream Symbolicator) both servers run (see
# scripts/load-common.sh): each dump's cold request goes to both and their answers are
# compared; then ROUNDS (3) alternating rounds of N sequential requests, omnisym then
# upstream, give each server's median and p90 over all its rounds, its peak RSS (VmHWM)
# over the cold and sequential requests, and the ratios omnisym / upstream; the
# concurrent step follows, per server.
# Needs: cargo, python3 (stdlib only), Linux /proc. Run it on a quiet machine.
set -euo pipefail
cd "$(dirname "$0")/.."

export N="${N:-200}" C="${C:-50}" VARIANT="${VARIANT:-nofp}"

. scripts/load-common.sh

start_server "max_concurrent_requests: $(( 2 * C > 200 ? 2 * C : 200 ))"
SPEC=""
for name in "${SERVERS[@]}"; do
    SPEC+="$name=${PID_OF[$name]}=${URL_OF[$name]} "
done
export SPEC TMP ROUNDS COMPARE_OUT="${COMPARE_OUT:-}"

python3 - <<'EOF'
import json, os, shutil, statistics, sys, threading, time, urllib.error, urllib.request

sys.path.insert(0, "scripts")
from compare_answers import report as compare_answers  # noqa: E402

N, C, ROUNDS = int(os.environ["N"]), int(os.environ["C"]), int(os.environ["ROUNDS"])
FIX = os.path.join("fixtures", "minidump")
manifest = json.load(open(os.path.join(FIX, "manifest.json")))
variants = (list(manifest["variants"]) if os.environ["VARIANT"] == "all"
            else os.environ["VARIANT"].split())
servers = []
for spec in os.environ["SPEC"].split():
    name, pid, url = spec.split("=", 2)
    servers.append({"name": name, "pid": int(pid), "url": url})
comparing = len(servers) > 1
rounds = ROUNDS if comparing else 1

def record(*fields):
    if os.environ["COMPARE_OUT"]:
        with open(os.environ["COMPARE_OUT"], "a") as f:
            f.write("\t".join(str(x) for x in fields) + "\n")

# The native layout: <code_id[:2]>/<code_id[2:]>{,.debug,.src.zip}, every variant's.
symbols = os.path.join(os.environ["TMP"], "symbols")
for variant in variants:
    v = manifest["variants"][variant]
    gdb = os.path.join(symbols, v["code_id"][:2], v["code_id"][2:])
    os.makedirs(os.path.dirname(gdb), exist_ok=True)
    for kind, suffix in (("executable", ""), ("debug", ".debug"), ("source_bundle", ".src.zip")):
        shutil.copy(os.path.join(FIX, v["files"][kind]), gdb + suffix)

boundary = "----omnisym-load-7b1e"
def field(name, data, filename=None):
    head = '--%s\r\nContent-Disposition: form-data; name="%s"' % (boundary, name)
    if filename:
        head += '; filename="%s"\r\nContent-Type: application/octet-stream' % filename
    return head.encode() + b"\r\n\r\n" + data + b"\r\n"
def body_of(dump):
    return (field("upload_file_minidump", dump, "crash.dmp")
            + field("sources", json.dumps([{"type": "filesystem", "id": "fixtures",
                                             "path": symbols, "layout": {"type": "native"}}]).encode())
            + field("options", b"{}")
            + ("--%s--\r\n" % boundary).encode())

def post(server, body):
    """One request: its latency in ms and the answer."""
    req = urllib.request.Request(server["url"] + "/minidump", data=body, method="POST",
                                 headers={"Content-Type": "multipart/form-data; boundary=" + boundary})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=120) as resp:
        answer = json.load(resp)
    ms = (time.perf_counter() - t0) * 1000
    if answer.get("status") != "completed":
        raise SystemExit("%s: request failed: %s" % (server["name"], json.dumps(answer)[:500]))
    return ms, answer

def wrong_frame(answer, want_function):
    """Why the crashing thread's first frame is not the oracle's, or None."""
    threads = [t for t in answer["stacktraces"] if t.get("is_requesting")]
    if not threads or threads[0]["frames"][0].get("function") != want_function:
        return "unexpected answer: %s" % json.dumps(threads[0]["frames"][:2] if threads else answer)[:500]
    return None

def status(server, field):
    for line in open("/proc/%d/status" % server["pid"]):
        if line.startswith(field + ":"):
            return int(line.split()[1])  # kB

def p90(lat):
    return lat[min(len(lat) - 1, int(round(0.9 * len(lat))) - 1)]

def ratio(a, b):
    return "%.2f" % (a / b) if b else "n/a"

dumps = {}
for variant in variants:
    v = manifest["variants"][variant]
    dump = open(os.path.join(FIX, v["files"]["minidump"]), "rb").read()
    body, want = body_of(dump), v["frames"][0]["function"]
    dumps[variant] = (body, want)
    work = "warm /minidump %s" % variant
    active = []
    if comparing:
        print("\nvariant %s (%d byte dump)" % (variant, len(dump)))
    else:
        s = servers[0]
        print("omnisym %s, variant %s (%d byte dump), pid %d" % (s["url"], variant, len(dump), s["pid"]))
    answers = {}
    for s in servers:
        try:
            ms, answer = post(s, body)
        except (urllib.error.URLError, SystemExit) as e:
            if s["name"] == "omnisym":
                raise
            print("cold request (%s): failed: %s" % (s["name"], e))
            record("note", work, "%s failed the cold request: %s" % (s["name"], e))
            continue
        why = wrong_frame(answer, want)
        if why and s["name"] == "omnisym":
            raise SystemExit(why)
        label = "cold request (%s):" % s["name"] if comparing else "cold request:"
        print("%-24s %8.1f ms%s" % (label, ms, ("   " + why) if why else ""))
        post(s, body)  # one more warm-up
        answers[s["name"]] = answer
        active.append(s)
    if comparing and len(answers) > 1:
        names = [s["name"] for s in servers]
        count = compare_answers(answers[names[0]], answers[names[1]], names)
        if count:
            record("note", work, "answers differ in %d places (see the log)" % count)

    lat = {s["name"]: [] for s in active}
    for r in range(rounds):
        for s in active:
            strict = s["name"] == "omnisym"
            run = []
            for _ in range(N):
                ms, answer = post(s, body)
                why = strict and wrong_frame(answer, want)
                if why:
                    raise SystemExit(why)
                run.append(ms)
            run.sort()
            lat[s["name"]] += run
            if comparing:
                print("round %d/%d, %-9s %d sequential: median %6.1f ms   p90 %6.1f ms   max %6.1f ms"
                      % (r + 1, rounds, s["name"] + ",", N, statistics.median(run), p90(run), run[-1]))
    summary = {}
    for s in active:
        l = sorted(lat[s["name"]])
        summary[s["name"]] = (statistics.median(l), p90(l))
        label = "%s, warm" % s["name"] if comparing else "warm"
        print("%s, %d sequential:    median %6.1f ms   p90 %6.1f ms   max %6.1f ms"
              % (label, len(l), statistics.median(l), p90(l), l[-1]))
    if comparing and len(summary) > 1:
        (om, op), (um, up) = summary["omnisym"], summary["upstream"]
        print("omnisym / upstream: median %s, p90 %s (below 1: omnisym answers sooner)"
              % (ratio(om, um), ratio(op, up)))
    for s in servers:
        if s["name"] in summary:
            med, ninety = summary[s["name"]]
            hwm = status(s, "VmHWM")
            record("result", work + ", median", s["name"], "%.2f" % med, "ms", hwm)
            record("result", work + ", p90", s["name"], "%.2f" % ninety, "ms", hwm)
        else:
            record("result", work + ", median", s["name"], "n/a", "ms", "")
            record("result", work + ", p90", s["name"], "n/a", "ms", "")

if comparing:
    print("\npeak RSS (VmHWM) over the cold and sequential requests: "
          + ", ".join("%s %.1f MiB" % (s["name"], status(s, "VmHWM") / 1024) for s in servers))

for variant in variants:
    body, want = dumps[variant]
    for s in servers:
        rss_before = status(s, "VmRSS")
        with open("/proc/%d/clear_refs" % s["pid"], "w") as f:
            f.write("5")  # resets VmHWM to the current RSS
        results, errors = [], []
        def worker():
            try:
                results.append(post(s, body)[0])
            except BaseException as e:  # noqa
                errors.append(repr(e))
        threads = [threading.Thread(target=worker) for _ in range(C)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = (time.perf_counter() - t0) * 1000
        prefix = "%s, %s, " % (s["name"], variant) if comparing else ""
        if errors:
            message = "%d of %d concurrent requests failed: %s" % (len(errors), C, errors[:3])
            if s["name"] == "omnisym":
                raise SystemExit(message)
            print(prefix + message)
            continue
        results.sort()
        print("%s%d concurrent:           wall %6.1f ms   median %6.1f ms   max %6.1f ms"
              % (prefix, C, wall, statistics.median(results), results[-1]))
        print("%sserver RSS: %.1f MiB before, peak (VmHWM) %.1f MiB during the %d concurrent requests"
              % (prefix, rss_before / 1024, status(s, "VmHWM") / 1024, C))
EOF
