#!/usr/bin/env python3
"""Turns gdb's record of a crashed program (gdb_stop.py's stop.json) into a /symbolicate
workload: the request body, the symbol directory and what the answer must show. Run by
generate.sh, which says what each workload is; exits non-zero, saying why, when the
stop does not have the workload's shape.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys


def fail(message):
    sys.exit(f"generate.py: {message}")


def build_id(path):
    notes = subprocess.run(["readelf", "-n", path], check=True, capture_output=True,
                           text=True).stdout
    found = re.search(r"Build ID: ([0-9a-f]+)", notes)
    if not found:
        fail(f"{path} has no GNU build id")
    return found.group(1)


def debug_id(code_id):
    """The debug id of an ELF file: its build id's first 16 bytes as a little-endian GUID,
    as Sentry and Symbolicator derive it."""
    raw = bytes.fromhex(code_id)[:16].ljust(16, b"\0")
    guid = raw[3::-1] + raw[5:3:-1] + raw[7:5:-1] + raw[8:]
    h = guid.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def is_elf(path):
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", required=True)
    ap.add_argument("--build", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--frames", required=True, help="MIN:MAX input frames per thread")
    ap.add_argument("--built", action="append", default=[],
                    help="a module built here, whose debug file the source has")
    ap.add_argument("--without", action="append", default=[],
                    help="a system module that must have frames (without symbols)")
    args = ap.parse_args()
    low, high = (int(x) for x in args.frames.split(":"))
    build = os.path.realpath(args.build)

    stop = json.load(open(os.path.join(build, "stop.json")))
    if stop["signal"] != 11:
        fail(f"the program stopped on signal {stop['signal']}, not SIGSEGV")
    threads = stop["threads"]
    if len(threads) != args.threads:
        fail(f"{len(threads)} threads at the stop, not {args.threads}")
    if sum(t["crashed"] for t in threads) != 1:
        fail("not exactly one crashed thread")

    # Modules: every mapped ELF object, from its lowest to its highest mapping.
    spans = {}
    for m in stop["mappings"]:
        start, end = spans.get(m["path"], (m["start"], m["end"]))
        spans[m["path"]] = (min(start, m["start"]), max(end, m["end"]))
    modules = []
    for path, (start, end) in sorted(spans.items(), key=lambda item: item[1]):
        if not is_elf(path):
            continue
        real = os.path.realpath(path)
        built = os.path.dirname(real) == build
        if built and os.path.basename(real) not in args.built:
            fail(f"{path} was built here but is not a module of {args.workload}")
        code_id = build_id(real)
        # A stable name for what was built in a temp dir; system files keep theirs.
        name = f"/opt/workloads/{args.workload}/{os.path.basename(real)}" if built else path
        modules.append({"path": real, "start": start, "end": end, "symbols": built,
                        "body": {"type": "elf", "code_id": code_id,
                                 "debug_id": debug_id(code_id), "code_file": name,
                                 "debug_file": name, "image_addr": hex(start),
                                 "image_size": end - start}})
    missing = set(args.built) - {os.path.basename(m["path"]) for m in modules if m["symbols"]}
    if missing:
        fail(f"built modules not mapped at the stop: {sorted(missing)}")

    def module_of(pc):
        for index, m in enumerate(modules):
            if m["start"] <= pc < m["end"]:
                return index
        fail(f"frame at {pc:#x} is in no mapped ELF object")

    stacktraces, expect_threads = [], []
    referenced = set()
    total_in = total_gdb = most_inlined = 0
    for t in threads:
        frames = t["frames"]
        if not low <= len(frames) <= high:
            fail(f"thread {t['num']} has {len(frames)} frames, not {low}..{high}")
        expected = []
        for f in frames:
            index = module_of(f["pc"])
            referenced.add(index)
            shown = 1 + len(f["inlined"])
            expected.append({"module": index, "symbols": modules[index]["symbols"],
                             "gdb_frames": shown, "gdb_function": f["function"]})
            total_gdb += shown
            if modules[index]["symbols"]:
                most_inlined = max(most_inlined, len(f["inlined"]))
        total_in += len(frames)
        stacktraces.append({
            "thread_id": t["num"],
            "is_requesting": t["crashed"],
            "registers": {},
            "frames": [{"instruction_addr": hex(f["pc"])} for f in frames],
        })
        expect_threads.append(expected)

    for m in modules:
        index = modules.index(m)
        name = os.path.basename(m["path"])
        if m["symbols"] and index not in referenced:
            fail(f"no frame in {name}, which has symbols")
        if name in args.without and index not in referenced:
            fail(f"no frame in {name}, which should be without symbols")
    if not any(not modules[i]["symbols"] for i in referenced):
        fail("no frame in a module without symbols")
    if most_inlined < 3:
        fail(f"at most {most_inlined} inline frames at a call site: the inlining did not happen")

    # The debug files, split from the built objects as a distribution's -dbg package is.
    symbols = os.path.join(args.out, "symbols")
    for m in modules:
        if not m["symbols"]:
            continue
        code_id = m["body"]["code_id"]
        dest = os.path.join(symbols, code_id[:2], code_id[2:] + ".debug")
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        subprocess.run(["objcopy", "--only-keep-debug", m["path"], dest], check=True)

    body = {
        "platform": "native",
        "signal": 11,
        "sources": [{"id": "local", "type": "filesystem", "path": os.path.realpath(symbols),
                     "layout": {"type": "native"}, "is_public": True}],
        "modules": [m["body"] for m in modules],
        "stacktraces": stacktraces,
    }
    with open(os.path.join(args.out, "body.json"), "w") as out:
        json.dump(body, out, indent=1)
    expect = {
        "workload": args.workload,
        "modules": [{"code_file": m["body"]["code_file"], "symbols": m["symbols"],
                     "referenced": i in referenced} for i, m in enumerate(modules)],
        "threads": expect_threads,
    }
    with open(os.path.join(args.out, "expect.json"), "w") as out:
        json.dump(expect, out, indent=1)
    with_symbols = sum(1 for i in referenced if modules[i]["symbols"])
    print(f"{args.workload}: {len(threads)} threads, {total_in} input frames "
          f"({total_gdb} with gdb's inline frames) over {len(referenced)} modules "
          f"({with_symbols} with symbols, {len(referenced) - with_symbols} without), "
          f"{len(modules)} modules listed, body {os.path.getsize(os.path.join(args.out, 'body.json'))} bytes")
    shutil.rmtree(os.path.join(build, "__pycache__"), ignore_errors=True)


if __name__ == "__main__":
    main()
