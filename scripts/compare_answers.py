#!/usr/bin/env python3
"""Compares two servers' answers to the same request (omnisym's and upstream
Symbolicator's) on what matters to a client, and prints every difference:

- the answer's `status`, and how many `errors` it lists (JS, JVM);
- each module's `debug_status` and `unwind_status`, by position (native, minidump);
- each stack trace's frames: the frames that came from one input frame are grouped by
  `original_index` (native, minidump) or `index` (JVM), else taken one by one (JS), and
  each frame's `status`, `symbol`, `function`, `filename` and `lineno` compared.

Usage: compare_answers.py A.json B.json [NAME_A NAME_B]. It prints the first DIFF_LIMIT
(40; 0 for all) differences and, last, `differences: N`; the exit status is 0 either way
(a difference is a finding to list, not a failure). scripts/load-common.sh runs it;
scripts/minidump-load.sh imports `report` from here.
"""
import json
import os
import sys

FRAME_FIELDS = ("status", "symbol", "function", "filename", "lineno")
MODULE_FIELDS = ("debug_status", "unwind_status")


def _groups(frames):
    """The frames by the input frame they came from, in order."""
    groups = {}
    for position, frame in enumerate(frames):
        key = frame.get("original_index", frame.get("index", position))
        groups.setdefault(key, []).append(frame)
    return groups


def compare(a, b, names=("omnisym", "upstream")):
    """The differences between answers a and b, one line each."""
    na, nb = names
    diffs = []

    def differ(where, what, x, y):
        diffs.append(f"{where}: {what}: {na} {x!r} / {nb} {y!r}")

    if a.get("status") != b.get("status"):
        differ("answer", "status", a.get("status"), b.get("status"))
    errors_a, errors_b = a.get("errors") or [], b.get("errors") or []
    if len(errors_a) != len(errors_b):
        differ("answer", "errors", errors_a, errors_b)

    modules_a, modules_b = a.get("modules") or [], b.get("modules") or []
    if len(modules_a) != len(modules_b):
        differ("answer", "modules", len(modules_a), len(modules_b))
    for i, (ma, mb) in enumerate(zip(modules_a, modules_b)):
        for field in MODULE_FIELDS:
            if ma.get(field) != mb.get(field):
                differ(f"module {i} ({ma.get('code_file') or ma.get('debug_file')})",
                       field, ma.get(field), mb.get(field))

    traces_a, traces_b = a.get("stacktraces") or [], b.get("stacktraces") or []
    if len(traces_a) != len(traces_b):
        differ("answer", "stacktraces", len(traces_a), len(traces_b))
    for t, (ta, tb) in enumerate(zip(traces_a, traces_b)):
        groups_a, groups_b = _groups(ta.get("frames") or []), _groups(tb.get("frames") or [])
        for key in sorted(set(groups_a) | set(groups_b), key=str):
            ga, gb = groups_a.get(key, []), groups_b.get(key, [])
            where = f"stacktrace {t} input frame {key}"
            if len(ga) != len(gb):
                differ(where, "frames",
                       [f.get("function") for f in ga], [f.get("function") for f in gb])
                continue
            for n, (fa, fb) in enumerate(zip(ga, gb)):
                at = where if len(ga) == 1 else f"{where} (frame {n + 1} of {len(ga)})"
                for field in FRAME_FIELDS:
                    if fa.get(field) != fb.get(field):
                        differ(at, field, fa.get(field), fb.get(field))
    return diffs


def frame_count(answer):
    return sum(len(t.get("frames") or []) for t in answer.get("stacktraces") or [])


def report(a, b, names=("omnisym", "upstream")):
    """Prints the comparison (DIFF_LIMIT lines of differences, 40; 0 for all); returns
    the number of differences."""
    diffs = compare(a, b, names)
    limit = int(os.environ.get("DIFF_LIMIT", "40")) or len(diffs)
    if not diffs:
        print(f"answers agree: {names[0]} {frame_count(a)} frames, {names[1]} "
              f"{frame_count(b)} frames ({', '.join(FRAME_FIELDS)} of every frame)")
    else:
        print(f"answers differ in {len(diffs)} places ({names[0]} {frame_count(a)} frames, "
              f"{names[1]} {frame_count(b)} frames):")
        for line in diffs[:limit]:
            print(f"    {line}")
        if len(diffs) > limit:
            print(f"    ... and {len(diffs) - limit} more")
    print(f"differences: {len(diffs)}")
    return len(diffs)


def main(argv):
    if len(argv) not in (3, 5):
        sys.exit("usage: compare_answers.py A.json B.json [NAME_A NAME_B]")
    a, b = (json.load(open(path)) for path in argv[1:3])
    names = tuple(argv[3:5]) or ("omnisym", "upstream")
    report(a, b, names)


if __name__ == "__main__":
    main(sys.argv)
