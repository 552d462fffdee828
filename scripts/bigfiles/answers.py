#!/usr/bin/env python3
"""Asks a running server (omnisym or upstream Symbolicator: the same /symbolicate API)
for every address of a truth file (from generate.sh) and counts its answers that match.

  answers.py URL TRUTH SOURCE_ROOT LAYOUT [--sample N] [--dump FILE] [--first]

SOURCE_ROOT is a filesystem source's root in LAYOUT (unified or native), given to the
server in each request. --first sends one address and returns when it is answered (the
cold first answer); otherwise prints one JSON line:
  {"total", "answered", "chain_exact", "outer_exact", "symbolicated"}
chain_exact: every frame of the inline chain has the truth's function, file and line;
outer_exact: the outermost frame (the real function) has them. Names are compared on
what llvm-symbolizer and symbolic both spell the same way: see norm()."""
import argparse
import json
import random
import re
import sys
import time
import urllib.request

# Where the request says the image sits: any base works; the truth is relative to its
# image_vmaddr, so this is added back.
BASES = {"elf": 0x7F0000000000, "macho": 0x100000000, "pe": 0x140000000}
BATCH = 100


def module_type(fmt):
    if fmt.startswith("elf") or fmt == "breakpad":
        return "elf"
    return {"macho-fat": "macho", "pdb": "pe"}[fmt]


def norm(name):
    """The function's qualified name without parameters, qualifiers or return type:
    llvm-symbolizer prints `int ns::leaf<3>(int)` for a template's linkage name and
    symbolic `ns::leaf<3>`; both agree on what is left."""
    name = name.strip()
    # LLVM's demangler spells a closure type 'lambda'(int), 'lambda0'(int)...; GNU's
    # and symbolic's {lambda(int)#1}, {lambda(int)#2}...: the same mangled name.
    name = re.sub(r"'lambda(\d*)'\(([^()]*)\)",
                  lambda m: "{lambda(%s)#%d}" % (m.group(2), int(m.group(1)) + 2 if m.group(1) else 1),
                  name)
    # Parameter list (and const) at the end: the last balanced (...) group.
    if name.endswith(" const"):
        name = name[: -len(" const")]
    if name.endswith(")"):
        depth = 0
        for i in range(len(name) - 1, -1, -1):
            c = name[i]
            if c == ")":
                depth += 1
            elif c == "(":
                depth -= 1
                if depth == 0:
                    # `(anonymous namespace)` and operator() are names, not parameters.
                    if not name[:i].endswith(("operator", "anonymous namespace")):
                        name = name[:i]
                    break
    # A return type before the name: a space outside <> and ().
    depth = 0
    cut = -1
    for i, c in enumerate(name):
        if c in "<(":
            depth += 1
        elif c in ">)":
            depth -= 1
        elif c == " " and depth == 0:
            cut = i
    if cut >= 0 and not name[:cut].endswith("operator"):
        name = name[cut + 1:]
    return name


def request(url, body):
    req = urllib.request.Request(url + "/symbolicate", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=3600) as r:
        answer = json.load(r)
    # Upstream answers "pending" with a request id when it takes longer than its timeout.
    while answer.get("status") == "pending":
        time.sleep(0.2)
        with urllib.request.urlopen(f"{url}/requests/{answer['request_id']}?timeout=30", timeout=3600) as r:
            answer = json.load(r)
    return answer


def ask(url, truth, entries, root, layout):
    fmt = truth["format"]
    mtype = module_type(fmt)
    modules = {m["arch"]: m for m in truth["modules"]}
    out = []
    by_arch = {}
    for e in entries:
        by_arch.setdefault(e["arch"], []).append(e)
    for arch, rows in by_arch.items():
        m = modules[arch]
        base = BASES[mtype]
        module = {"type": mtype, "debug_id": m["debug_id"], "image_addr": hex(base), "arch": arch}
        if m.get("code_id"):
            module["code_id"] = m["code_id"]
        module["debug_file"] = m["debug_file"]
        if m.get("code_file"):
            module["code_file"] = m["code_file"]
        if m.get("image_size"):
            module["image_size"] = m["image_size"]
        vm = int(m["image_vmaddr"], 16)
        for i in range(0, len(rows), BATCH):
            chunk = rows[i:i + BATCH]
            body = {
                "sources": [{"type": "filesystem", "id": "bigfiles", "path": root,
                             "layout": {"type": layout}}],
                "modules": [module],
                "stacktraces": [{"frames": [
                    # The truth is for these very addresses: no caller adjustment.
                    {"instruction_addr": hex(base + int(e["addr"], 16) - vm),
                     "adjust_instruction_addr": False} for e in chunk]}],
                "options": {"dif_candidates": False},
            }
            answer = request(url, body)
            frames = answer.get("stacktraces", [{}])[0].get("frames", [])
            got = {}
            for f in frames:
                got.setdefault(f.get("original_index", 0), []).append(f)
            for j, e in enumerate(chunk):
                out.append((e, got.get(j, []), answer))
    return out


def same(want, got):
    return (got.get("status") == "symbolicated"
            and norm(got.get("function") or got.get("raw_function") or "") == norm(want["function"])
            and (got.get("abs_path") or got.get("filename")) == want["file"]
            and got.get("lineno") == want["line"])


def sampled(entries, n):
    """A fixed subset of N entries (all when N is 0 or more than there are)."""
    if n and n < len(entries):
        return random.Random(45).sample(entries, n)
    return entries


def score(results, dump=None):
    stats = {"total": len(results), "answered": 0, "symbolicated": 0, "chain_exact": 0, "outer_exact": 0}
    for e, frames, _ in results:
        want = e["frames"]
        if frames:
            stats["answered"] += 1
        if frames and all(f.get("status") == "symbolicated" for f in frames):
            stats["symbolicated"] += 1
        chain = len(frames) == len(want) and all(same(w, g) for w, g in zip(want, frames))
        outer = bool(frames) and same(want[-1], frames[-1])
        stats["chain_exact"] += chain
        stats["outer_exact"] += outer
        if not chain and dump is not None:
            dump.append({"addr": e["addr"], "arch": e["arch"], "want": want,
                         "got": [{k: f.get(k) for k in ("status", "function", "raw_function", "abs_path",
                                                         "filename", "lineno")} for f in frames]})
    return stats


def main():
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("truth")
    p.add_argument("root")
    p.add_argument("layout")
    p.add_argument("--sample", type=int, default=0)
    p.add_argument("--dump")
    p.add_argument("--first", action="store_true")
    a = p.parse_args()
    truth = json.load(open(a.truth))
    entries = truth["addresses"][:1] if a.first else sampled(truth["addresses"], a.sample)
    results = ask(a.url.rstrip("/"), truth, entries, a.root, a.layout)
    if a.first:
        _, frames, answer = results[0]
        ok = any(f.get("status") == "symbolicated" for f in frames)
        print(json.dumps({"symbolicated": ok, "status": answer.get("status")}))
        return
    dump = [] if a.dump else None
    stats = score(results, dump)
    if a.dump:
        with open(a.dump, "w") as f:
            json.dump(dump, f, indent=1)
    print(json.dumps(stats))


if __name__ == "__main__":
    sys.exit(main())
