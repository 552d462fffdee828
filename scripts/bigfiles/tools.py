#!/usr/bin/env python3
"""Helpers of scripts/bigfiles/generate.sh (not run on their own):

  replicate TOKEN COUNT SRCDIR DSTDIR   COUNT copies of SRCDIR's objects, TOKEN renumbered
  fat64 OUT THIN...               join thin Mach-O files with 64-bit fat headers
  truth FILE FORMAT SEED COUNT OUT [ARCH:THIN...]
                                  FILE.truth.json: COUNT addresses inside functions and
                                  llvm-symbolizer's frames (inline chain) for each

The truth's addresses are drawn from the code sections with random.Random(SEED) and
kept when llvm-symbolizer puts them inside a function with a line: that is what
"inside a function" means for every format alike (padding between functions has none).
"""
import json
import os
import random
import re
import struct
import subprocess
import sys

LLVM_BIN = os.environ.get("LLVM_BIN", "/usr/lib/llvm-14/bin")


def run(*args):
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def replicate(token, count, srcdir, dstdir):
    """Replica i of every object of SRCDIR goes to DSTDIR/r<i>/ with TOKEN's digits set
    to i; prints the paths in link order (for a response file)."""
    token = token.encode()
    prefix = token.rstrip(b"0123456789")
    digits = len(token) - len(prefix)
    names = sorted(n for n in os.listdir(srcdir) if n.endswith(".o"))
    blobs = []
    for n in names:
        with open(os.path.join(srcdir, n), "rb") as f:
            blobs.append(f.read())
    out = []
    for i in range(int(count)):
        new = prefix + str(i).zfill(digits).encode()
        if len(new) != len(token):
            sys.exit(f"replicate: {i} does not fit {digits} digits")
        d = os.path.join(dstdir, f"r{i:06d}")
        os.makedirs(d, exist_ok=True)
        for n, data in zip(names, blobs):
            path = os.path.join(d, n)
            # Same length: every offset, size and relocation in the object stays valid.
            with open(path, "wb") as f:
                f.write(data.replace(token, new))
            out.append(path)
    print("\n".join(out))


def fat64(out, thins):
    """A fat file whose offsets and sizes are 64-bit (FAT_MAGIC_64, fat_arch_64): llvm-lipo
    14 writes only 32-bit fat_arch, which cannot place a slice past 4 GiB."""
    archs = []
    for path in thins:
        with open(path, "rb") as f:
            magic, cputype, cpusubtype = struct.unpack("<III", f.read(12))
        if magic != 0xFEEDFACF:
            sys.exit(f"fat64: {path} is not a thin 64-bit Mach-O")
        archs.append((path, cputype, cpusubtype, os.path.getsize(path)))
    align = 14  # 16 KiB, what lipo uses for arm64 and is fine for x86_64
    offset = 8 + 32 * len(archs)
    table = []
    for path, cputype, cpusubtype, size in archs:
        offset = (offset + (1 << align) - 1) & ~((1 << align) - 1)
        table.append((path, cputype, cpusubtype, offset, size))
        offset += size
    with open(out, "wb") as f:
        f.write(struct.pack(">II", 0xCAFEBABF, len(table)))
        for _, cputype, cpusubtype, off, size in table:
            f.write(struct.pack(">IIQQII", cputype, cpusubtype, off, size, align, 0))
        for path, _, _, off, _ in table:
            f.seek(off)
            with open(path, "rb") as src:
                while True:
                    chunk = src.read(1 << 24)
                    if not chunk:
                        break
                    f.write(chunk)


def code_ranges(thin):
    """(start, end) of each executable section of the linked file `thin` (ELF, Mach-O
    or PE), from llvm-readobj."""
    out = run(f"{LLVM_BIN}/llvm-objdump", "--section-headers", thin)
    ranges = []
    for line in out.splitlines():
        m = re.match(r"\s*\d+\s+(\S+)\s+([0-9a-f]+)\s+([0-9a-f]+)\s+(.*)", line)
        if m and "TEXT" in m.group(4).split():
            size, start = int(m.group(2), 16), int(m.group(3), 16)
            if size:
                ranges.append((start, start + size))
    if not ranges:
        sys.exit(f"truth: no code section in {thin}")
    return ranges


def symbolize(obj, addrs, extra, llvm_bin):
    text = "\n".join(hex(a) for a in addrs) + "\n"
    out = subprocess.run(
        [f"{llvm_bin}/llvm-symbolizer", "--output-style=JSON", "--inlines", "--demangle",
         f"--obj={os.path.abspath(obj)}", *extra], input=text,
        cwd=os.path.dirname(os.path.abspath(obj)), check=True, capture_output=True, text=True
    ).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def truth_for(obj, ranges, rng, count, extra, llvm_bin):
    total = sum(e - s for s, e in ranges)
    picked, seen = [], set()
    for _ in range(50):
        want = (count - len(picked)) * 2 + 16
        cands = []
        for _ in range(want):
            r = rng.randrange(total)
            for s, e in ranges:
                if r < e - s:
                    cands.append(s + r)
                    break
                r -= e - s
        for answer in symbolize(obj, cands, extra, llvm_bin):
            addr = int(answer["Address"], 16)
            frames = answer.get("Symbol") or []
            if addr in seen or not frames:
                continue
            if any(f["FunctionName"] in ("", "??") or not f["Line"] or not f["FileName"] for f in frames):
                continue
            seen.add(addr)
            picked.append({
                "addr": hex(addr),
                "frames": [{"function": f["FunctionName"], "file": f["FileName"], "line": f["Line"]}
                           for f in frames],
            })
            if len(picked) == count:
                return picked
    sys.exit(f"truth: found only {len(picked)} of {count} addresses inside functions in {obj}")


def uuid_le(raw):
    """A Microsoft-style GUID from 16 bytes: the first three fields little-endian, as
    Sentry's debug ids read ELF build ids and PDB GUIDs."""
    d = raw[3::-1] + raw[5:3:-1] + raw[7:5:-1] + raw[8:]
    h = d.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def module(file, fmt, arch, code):
    """What a request needs to name this module: ids, and the address the truth's
    addresses are relative to (image_vmaddr)."""
    if fmt == "breakpad":
        with open(file, "rb") as f:
            head = f.read(4096).decode("utf-8", "replace").splitlines()
        mod = head[0].split()
        code_id = next((l.split()[2] for l in head if l.startswith("INFO CODE_ID ")), None)
        ident = mod[3]
        debug_id = f"{ident[:8]}-{ident[8:12]}-{ident[12:16]}-{ident[16:20]}-{ident[20:32]}"
        if ident[32:] not in ("", "0"):
            debug_id += "-" + ident[32:].lower()
        m = {"debug_id": debug_id.lower(), "code_id": code_id, "debug_file": mod[4]}
        base = elf_base(code)
    elif fmt.startswith("elf"):
        build_id = re.search(r"Build ID: ([0-9a-f]+)", run(f"{LLVM_BIN}/llvm-readelf", "-n", code)).group(1)
        m = {"debug_id": uuid_le(bytes.fromhex(build_id)[:16]), "code_id": build_id,
             "debug_file": os.path.basename(file)}
        base = elf_base(code)
    elif fmt == "pdb":
        out = run(f"{LLVM_BIN}/llvm-readobj", "--coff-debug-directory", "--file-headers", code)
        guid = bytes.fromhex(re.search(r"PDBGUID: \(([0-9A-F ]+)\)", out).group(1).replace(" ", ""))
        age = int(re.search(r"PDBAge: (\d+)", out).group(1))
        stamp = int(re.search(r"TimeDateStamp: .*\((0x[0-9A-F]+)\)", out).group(1), 16)
        image = int(re.search(r"SizeOfImage: (\d+)", out).group(1))
        m = {"debug_id": f"{uuid_le(guid)}-{age:x}", "code_id": f"{stamp:08X}{image:x}",
             "debug_file": os.path.basename(file), "code_file": os.path.basename(code),
             "image_size": image}
        base = int(re.search(r"ImageBase: (0x[0-9A-F]+)", out).group(1), 16)
    else:  # Mach-O: the thin linked file has the same UUID as its dSYM slice
        uuid = re.search(r"UUID: ([0-9A-F-]+)", run(f"{LLVM_BIN}/llvm-dwarfdump", "--uuid", code)).group(1)
        m = {"debug_id": uuid.lower(), "code_id": uuid.replace("-", "").lower(),
             "debug_file": os.path.basename(file)}
        out = run(f"{LLVM_BIN}/llvm-objdump", "--macho", "--private-headers", code)
        base = int(re.search(r"segname __TEXT\n\s*vmaddr (0x[0-9a-f]+)", out).group(1), 16)
    m["arch"] = arch
    m["image_vmaddr"] = hex(base)
    return m


def elf_base(path):
    out = run(f"{LLVM_BIN}/llvm-readelf", "-l", path)
    return min(int(m.group(1), 16) for m in re.finditer(r"LOAD\s+0x[0-9a-f]+\s+(0x[0-9a-f]+)", out))


def truth(file, fmt, seed, count, out, slices):
    rng = random.Random(int(seed))
    count = int(count)
    entries, modules = [], []
    oracle = LLVM_BIN
    if fmt == "pdb":
        # LLVM 14's native PDB reader gives wrong lines for the call sites of nested
        # inline frames (half of these addresses); LLVM 19's does not.
        oracle = os.environ.get("PDB_ORACLE_LLVM_BIN", "/usr/lib/llvm-19/bin")
        if not os.access(f"{oracle}/llvm-symbolizer", os.X_OK):
            sys.exit(f"truth: the PDB's truth needs {oracle}/llvm-symbolizer (apt-get install llvm-19)")
    per = [count // len(slices) + (1 if i < count % len(slices) else 0) for i in range(len(slices))]
    for n, spec in zip(per, slices):
        arch, code, debug = spec.split(":", 2)
        extra = []
        if code.endswith(".exe"):
            extra = []  # the PE names its PDB; llvm-symbolizer reads it from beside the PE
            obj = code
        else:
            obj = debug
        modules.append(module(file, fmt, arch, code))
        for e in truth_for(obj, code_ranges(code), rng, n, extra, oracle):
            e["arch"] = arch
            entries.append(e)
    version = run(f"{oracle}/llvm-symbolizer", "--version").splitlines()
    doc = {
        "file": os.path.basename(file),
        "format": fmt,
        "seed": int(seed),
        "symbolizer": next((v.strip() for v in version if "version" in v.lower()), "llvm-symbolizer"),
        "frames_order": "innermost first; addr is the address llvm-symbolizer was asked",
        "modules": modules,
        "addresses": entries,
    }
    # One address per line: small, and a changed answer shows as one changed line.
    addresses = doc.pop("addresses")
    text = json.dumps(doc, indent=1, sort_keys=True)
    rows = ",\n".join("  " + json.dumps(a, sort_keys=True) for a in addresses)
    with open(out, "w") as f:
        f.write(text[:-2] + ',\n "addresses": [\n' + rows + "\n ]\n}\n")


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "replicate":
        replicate(*args)
    elif cmd == "fat64":
        fat64(args[0], args[1:])
    elif cmd == "truth":
        truth(args[0], args[1], args[2], args[3], args[4], args[5:])
    else:
        sys.exit(f"unknown command {cmd}")
