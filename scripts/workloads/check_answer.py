#!/usr/bin/env python3
"""Checks an answer to a generated workload's body against its expect.json
(generate.py): every input frame in a module with symbols comes back symbolicated,
every one in a module without symbols comes back `missing` (as upstream reports it),
and each module's debug_status is `found`, `missing`, or `unused` when no frame is in
it. Prints what it saw, with the output frames beside gdb's count (inlinees included)
for the frames with symbols; exits 1 on the first kind of mismatch it lists.

Usage: check_answer.py EXPECT.json ANSWER.json
"""
import json
import sys


def check(expect, answer):
    problems = []
    if answer.get("status") != "completed":
        return [f"answer status {answer.get('status')!r}"]

    modules = answer.get("modules") or []
    if len(modules) != len(expect["modules"]):
        problems.append(f"{len(modules)} modules in the answer, {len(expect['modules'])} sent")
    for want, got in zip(expect["modules"], modules):
        status = ("found" if want["symbols"] else "missing") if want["referenced"] else "unused"
        if got.get("debug_status") != status:
            problems.append(f"module {want['code_file']}: debug_status "
                            f"{got.get('debug_status')!r}, expected {status!r}")

    traces = answer.get("stacktraces") or []
    if len(traces) != len(expect["threads"]):
        problems.append(f"{len(traces)} stack traces in the answer, {len(expect['threads'])} sent")
    counts = {"symbolicated": 0, "missing": 0, "with symbols": 0, "out": 0, "gdb": 0}
    for t, (frames_in, trace) in enumerate(zip(expect["threads"], traces)):
        groups = {}
        for frame in trace.get("frames") or []:
            groups.setdefault(frame.get("original_index"), []).append(frame)
        for index, want in enumerate(frames_in):
            got = groups.get(index, [])
            statuses = {f.get("status") for f in got}
            where = f"thread {t} frame {index} ({want['gdb_function']})"
            if want["symbols"]:
                counts["with symbols"] += 1
                counts["out"] += len(got)
                counts["gdb"] += want["gdb_frames"]
                if statuses == {"symbolicated"}:
                    counts["symbolicated"] += 1
                else:
                    problems.append(f"{where}: statuses {sorted(map(str, statuses))}, "
                                    "expected symbolicated")
            elif statuses == {"missing"} and len(got) == 1:
                counts["missing"] += 1
            else:
                problems.append(f"{where}: {len(got)} frames with statuses "
                                f"{sorted(map(str, statuses))}, expected one missing")
    sent = sum(len(frames) for frames in expect["threads"])
    print(f"cold check: {counts['symbolicated']}/{counts['with symbols']} input frames with "
          f"symbols symbolicated ({counts['out']} output frames with inlinees, gdb shows "
          f"{counts['gdb']}), {counts['missing']}/{sent - counts['with symbols']} without "
          f"symbols missing; modules {[m.get('debug_status') for m in modules]}")
    return problems


def main():
    expect = json.load(open(sys.argv[1]))
    answer = json.load(open(sys.argv[2]))
    problems = check(expect, answer)
    for problem in problems[:20]:
        print(f"  {problem}")
    if problems:
        print(f"check_answer.py: {len(problems)} mismatches", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
