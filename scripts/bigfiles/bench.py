#!/usr/bin/env python3
"""The measuring part of scripts/bigfiles/bench.sh (see there for the knobs): one debug
file from generate.sh, one server at a time, a fresh cache each; prints one markdown
row per server."""
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import answers  # noqa: E402

SAMPLE_SECS = 0.05
IDLE_SECS = float(os.environ.get("IDLE_SECS", "2"))
TICK = os.sysconf("SC_CLK_TCK")


def unified_entries(truth, path):
    """(relative path, target) of each file a unified-layout filesystem source needs for
    this file: symlinks, so a 6 GiB file is not copied (both servers follow them)."""
    fmt = truth["format"]
    out = []
    for m in truth["modules"]:
        if fmt == "breakpad":
            # A .sym of an ELF lives under the build id, as the ELF would.
            key, kind = m["code_id"], "breakpad"
        elif fmt.startswith("elf"):
            key, kind = m["code_id"], "debuginfo"
        else:
            key, kind = m["debug_id"], "debuginfo"
        hexid = key.replace("-", "").lower()
        out.append((f"{hexid[:2]}/{hexid[2:]}/{kind}", path))
        if fmt == "pdb":
            exe = os.path.join(os.path.dirname(path), m["code_file"])
            out.append((f"{hexid[:2]}/{hexid[2:]}/executable", exe))
    return out


def source_tree(truth, path, root):
    shutil.rmtree(root, ignore_errors=True)
    for rel, target in unified_entries(truth, path):
        dst = os.path.join(root, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if not os.path.exists(dst):
            os.symlink(os.path.abspath(target), dst)


def status(pid):
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("RssAnon", "RssFile"):
                fields[k] = int(v.split()[0]) * 1024
    return fields


def cpu_ticks(pid):
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                parts = f.read().rsplit(")", 1)[1].split()
            total += int(parts[11]) + int(parts[12])
        except OSError:
            pass
    return total


def du(path):
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
            except OSError:
                pass
    return total


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(url, proc, limit=60):
    end = time.time() + limit
    while time.time() < end:
        if proc.poll() is not None:
            return False
        try:
            urllib.request.urlopen(url + "/healthcheck", timeout=1).read()
            return True
        except OSError:
            time.sleep(0.1)
    return False


class Cgroup:
    """A cgroup v1 memory group with a limit: the server runs in it."""

    def __init__(self, limit):
        self.path = f"/sys/fs/cgroup/memory/omnisym-bigfiles-{os.getpid()}"
        os.makedirs(self.path, exist_ok=True)
        with open(f"{self.path}/memory.limit_in_bytes", "w") as f:
            f.write(str(limit))

    def oom_kills(self):
        try:
            with open(f"{self.path}/memory.oom_control") as f:
                for line in f:
                    if line.startswith("oom_kill "):
                        return int(line.split()[1])
        except OSError:
            pass
        return 0

    def remove(self):
        try:
            os.rmdir(self.path)
        except OSError:
            pass


def config(kind, port, cache):
    if kind == "omnisym":
        return f"bind: 127.0.0.1:{port}\ncache_dir: {cache}\nconnect_to_reserved_ips: true\n"
    return (f"bind: 127.0.0.1:{port}\ncache_dir: {cache}\nconnect_to_reserved_ips: true\n"
            "logging:\n  level: warn\n")


def symcache_written(kind, cache):
    """Whether omnisym's SymCache for the file is in the cache (moved in whole from tmp/);
    upstream's answer already waited for its own."""
    if kind != "omnisym":
        return True
    for dirpath, _, files in os.walk(os.path.join(cache, "symcaches")):
        # A file is written as .tmp* beside its place and renamed in when whole.
        if any(not f.startswith(".tmp") for f in files):
            return True
    return False


def mib(n):
    return f"{n / 1048576:.1f}"


def run_one(kind, binary, file, truth_path, work, port, memcap, sample):
    truth = json.load(open(truth_path))
    base = os.path.join(work, kind)
    shutil.rmtree(base, ignore_errors=True)
    os.makedirs(base)
    cache = os.path.join(base, "cache")
    root = os.path.join(base, "source")
    source_tree(truth, file, root)
    conf = os.path.join(base, "config.yml")
    with open(conf, "w") as f:
        f.write(config(kind, port, cache))
    cg = Cgroup(memcap) if memcap else None
    args = [binary, "run", "--config", conf] if kind == "omnisym" else [binary, "-c", conf, "run"]
    log = open(os.path.join(base, "server.log"), "w")

    def enter_cgroup():
        if cg:
            with open(f"{cg.path}/cgroup.procs", "w") as f:
                f.write(str(os.getpid()))

    proc = subprocess.Popen(args, stdout=log, stderr=log, preexec_fn=enter_cgroup)
    url = f"http://127.0.0.1:{port}"
    row = {"server": kind, "file": truth["format"],
           "size": os.path.getsize(file)}
    try:
        if not wait_listening(url, proc):
            row["note"] = "did not start (see server.log)"
            return row
        peak = {"RssAnon": 0, "RssFile": 0}
        first = {}

        def ask_first():
            t = time.time()
            try:
                answer = answers.ask(url, truth, truth["addresses"][:1], root, "unified")
                first["ok"] = any(f.get("status") == "symbolicated" for f in answer[0][1])
            except Exception as e:  # the server died under the cap: recorded, not raised
                first["error"] = str(e)
            first["secs"] = time.time() - t

        # BENCH_TRACE=1: every sample to BENCH_WORK/SERVER/trace.tsv (seconds, RssAnon
        # and RssFile in MiB), to see which phase a peak belongs to.
        trace = open(os.path.join(base, "trace.tsv"), "w") if os.environ.get("BENCH_TRACE") else None
        t0 = time.time()
        asker = threading.Thread(target=ask_first)
        asker.start()
        last_cpu, last_busy = cpu_ticks(proc.pid), time.time()
        done = written = None
        while proc.poll() is None:
            try:
                s = status(proc.pid)
                cpu = cpu_ticks(proc.pid)
            except OSError:
                break
            for k in peak:
                peak[k] = max(peak[k], s.get(k, 0))
            now = time.time()
            if trace is not None:
                trace.write(f"{now - t0:.2f}\t{mib(s.get('RssAnon', 0))}\t{mib(s.get('RssFile', 0))}\n")
            if cpu != last_cpu:
                last_cpu, last_busy = cpu, now
            if written is None and symcache_written(kind, cache):
                written = now - t0
            if "secs" in first and now - last_busy >= IDLE_SECS and written is not None:
                done = last_busy - t0
                break
            time.sleep(SAMPLE_SECS)
        asker.join()
        row.update(peak)
        row["first"] = first.get("secs")
        row["first_ok"] = first.get("ok", False)
        row["idle"] = done
        if kind == "omnisym":
            row["conversion"] = written
        else:
            # Upstream answers only once its SymCache is written.
            row["conversion"] = first.get("secs")
        row["disk"] = du(cache)
        if proc.poll() is not None:
            row["note"] = f"server exited ({proc.returncode})"
            if cg and cg.oom_kills():
                row["note"] = "OOM-killed under MEMCAP"
            return row
        res = answers.ask(url, truth, answers.sampled(truth["addresses"], sample), root, "unified")
        row.update(answers.score(res))
        return row
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()
        shutil.rmtree(cache, ignore_errors=True)
        if cg:
            if cg.oom_kills() and "note" not in row:
                row["note"] = "OOM kill inside the cgroup"
            cg.remove()


def fmt_row(r):
    def secs(v):
        return "-" if v is None else f"{v:.1f}"
    correct = "-"
    if "total" in r:
        correct = f"{r['chain_exact']}/{r['total']} chain, {r['outer_exact']}/{r['total']} outer"
    return (f"| {r['server']} | {r['file']} | {mib(r['size'])} | {secs(r.get('first'))}"
            f"{'' if r.get('first_ok', True) else ' (unsymbolicated)'} | {secs(r.get('conversion'))} | "
            f"{mib(r.get('RssAnon', 0))} | {mib(r.get('RssFile', 0))} | {mib(r.get('disk', 0))} | "
            f"{correct} | {secs(r.get('idle'))} | {r.get('note', '')} |")


HEADER = ("| server | format | MiB | first answer s | conversion s | peak RssAnon MiB | "
          "peak RssFile MiB | cache MiB | correct (of truth) | idle after s | note |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|")


def main():
    file, work = sys.argv[1], sys.argv[2]
    servers = sys.argv[3:]
    truth_path = file + ".truth.json"
    memcap = os.environ.get("MEMCAP_BYTES")
    sample = int(os.environ.get("SAMPLE", "1000"))
    if os.environ.get("BENCH_HEADER", "1") == "1":
        print(HEADER)
    for spec in servers:
        kind, binary = spec.split("=", 1)
        if not os.access(binary, os.X_OK):
            fmt = json.load(open(truth_path))["format"]
            print(f"| {kind} | {fmt} | | | | | | | | | {binary} not found |")
            continue
        port = int(os.environ.get("PORT") or free_port())
        row = run_one(kind, binary, file, truth_path, work, port, int(memcap) if memcap else 0, sample)
        print(fmt_row(row), flush=True)
        with open(os.path.join(work, f"{kind}.json"), "w") as f:
            json.dump(row, f, indent=1)


if __name__ == "__main__":
    main()
