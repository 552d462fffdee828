#!/usr/bin/env python3
"""Writes the seed corpora under fuzz/corpus/<target>/ from the project's fixtures and
from small hand-written inputs. Deterministic: running it again rewrites the same files
(the zstd seeds come from the `zstd` tool and are skipped without it).

Usage: python3 fuzz/seeds.py
"""

import bz2
import gzip
import io
import json
import lzma
import shutil
import struct
import subprocess
import tempfile
import zipfile
import zlib
from pathlib import Path

FUZZ = Path(__file__).resolve().parent
FIXTURES = FUZZ.parent / "fixtures"
CORPUS = FUZZ / "corpus"

# Must match the constants of the targets that look for them.
BOUNDARY = b"fuzzboundary"
BUNDLE_DEBUG_ID = "2f259f80-58b7-44cb-bb4d-cd0b4e3e8a0b"


def fixture(path):
    return (FIXTURES / path).read_bytes()


def write(target, name, data):
    if isinstance(data, str):
        data = data.encode()
    (CORPUS / target / name).write_bytes(data)


def gzip_bytes(data):
    return gzip.compress(data, mtime=0)


# ------------------------------------------------------------------- /symbolicate

def symbolicate_json():
    elf = {
        "type": "elf",
        "code_id": "f1c3bcc0279865fe3058404b2831d9e64135386c",
        "debug_id": "c0bcc3f1-9827-fe65-3058-404b2831d9e6",
        "code_file": "/usr/lib/crash",
        "debug_file": "crash.debug",
        "image_addr": "0x400000",
        "image_size": 8192,
    }
    requests = {
        "elf": (
            "timeout=5&scope=project-1",
            {
                "platform": "native",
                "signal": 11,
                "stacktraces": [
                    {
                        "thread_id": 1,
                        "is_requesting": True,
                        "registers": {"rip": "0x401020", "rsp": "0x7ffd0000"},
                        "frames": [
                            {"instruction_addr": "0x401020"},
                            {"instruction_addr": 4198450, "trust": "cfi"},
                            {"instruction_addr": "0x0", "trust": "scan"},
                        ],
                    }
                ],
                "modules": [elf],
                "options": {"dif_candidates": True, "apply_source_context": True},
            },
        ),
        "sources": (
            "",
            {
                "sources": [
                    {"type": "filesystem", "id": "local", "path": "/srv/symbols",
                     "layout": {"type": "native", "casing": "lowercase"}},
                    {"type": "http", "id": "msft", "url": "https://msdl.example/download/symbols/",
                     "layout": {"type": "symstore"}, "filters": {"filetypes": ["pdb", "pe"]},
                     "headers": {"X-Token": "t"}, "is_public": True},
                    {"type": "http", "id": "unified", "url": "https://symbols.example/base/",
                     "layout": {"type": "unified"}},
                    {"type": "s3", "id": "bucket", "bucket": "b", "prefix": "p/",
                     "region": "us-east-1", "access_key": "a", "secret_key": "s",
                     "layout": {"type": "ssqp"}},
                    {"type": "gcs", "id": "gcs", "bucket": "b", "prefix": "x",
                     "private_key": "k", "client_email": "e@example.com",
                     "layout": {"type": "debuginfod"}},
                    {"type": "sentry", "id": "sentry:project",
                     "url": "https://sentry.example/api/0/projects/o/p/files/dsyms/", "token": "t"},
                ],
                "stacktraces": [{"frames": [{"instruction_addr": "0x1000a"}]}],
                "modules": [
                    {"type": "pe", "code_id": "5AB380779000", "code_file": "C:\\app\\crash.exe",
                     "debug_id": "3249d99d-0c40-4931-8610-f4e4fb0b6936-1",
                     "debug_file": "C:\\app\\crash.pdb", "image_addr": "0x10000", "image_size": 36864},
                    {"type": "macho", "debug_id": "502FC0A5-1EC1-3E47-9998-684FA139DCA7",
                     "code_file": "/Applications/App.app/App", "image_addr": 4294967296},
                ],
            },
        ),
        "relative": (
            "scope=..%2F..%2Fescape",
            {
                "stacktraces": [
                    {"frames": [
                        {"instruction_addr": "0x8b", "addr_mode": "rel:0", "function_id": "0x3"},
                        {"instruction_addr": "0x10", "addr_mode": "rel:1"},
                        {"instruction_addr": "0xff", "addr_mode": "rel:9",
                         "function": "_ZN4core9panicking5panic17h0123456789abcdefE"},
                    ]}
                ],
                "modules": [
                    {"type": "pe_dotnet", "debug_id": "0c1033f7-8b1a-4f3e-9b2c-2a7a06c2a5d3-a3c8b7c2",
                     "debug_file": "App.pdb", "debug_checksum": "SHA256:00ff", "image_addr": "0x0"},
                    {"type": "wasm", "code_id": "bda18fd85d4a4eb893022d6bfad846b1",
                     "debug_file": "file://foo.invalid/demo.wasm", "image_addr": "0x0"},
                ],
            },
        ),
        "mangled": (
            "timeout=0.5",
            {
                "stacktraces": [{"frames": [
                    {"instruction_addr": "0x500", "function": "_ZN3foo3barEv"},
                    {"instruction_addr": "0x501", "symbol": "?f@@YAXXZ"},
                    {"instruction_addr": "0x502", "function": "$s4main3FooV3baryyF"},
                    {"instruction_addr": "0x503", "symbol": "_RNvC6_123foo3bar"},
                ]}],
                "modules": [{"type": "elf", "debug_id": "not-an-id", "image_addr": "0x400"}],
            },
        ),
    }
    for name, (query, body) in requests.items():
        write("symbolicate_json", name, query + "\n" + json.dumps(body, indent=1))


# ------------------------------------------------------------------- crash files

APPLE_X86 = """\
Incident Identifier: 9A4B7C21-6E0D-4F38-B2C5-7D1E3F905A68
CrashReporter Key:   7f3c2a91d0e84b56c1a9e2f4b8d06c7e13a5f920
Hardware Model:      Macmini8,1
Process:         birdfeeder [31337]
Path:            /Users/dev/birdfeeder
Identifier:      birdfeeder
Version:         2.3
Code Type:       X86-64 (Native)
Parent Process:  launchd [1]
Date/Time:       2025-06-14 09:12:45.000 +0200
OS Version:      Mac OS X 10.15.5 (19F101)
Report Version:  12

Exception Type:  EXC_BAD_ACCESS (SIGBUS)
Exception Codes: KERN_PROTECTION_FAILURE at 0x0000000000000010

Application Specific Information:
abort() called

Thread 0 Crashed:
0   birdfeeder                    0x0000000104a21f6c feed + 44
1   libdyld.dylib                 0x00007fff5c4a2ed9 start + 1

Thread 1:
0   libsystem_kernel.dylib        0x00007ff8000a1b2c 0x7ff80009a000 + 31532

Thread 0 crashed with X86 Thread State:
  rax: 0x0000000000000010  rbx: 0x0000000000000000  rcx: 0x00007ffee9b21a40  rdx: 0x00007ffee9b219c8
  rip: 0x0000000104a21f6c

Binary Images:
       0x104a20000 -        0x104a23fff +birdfeeder x86_64  <3e9d1b7a55c24f0e9a61b8c4d2f07e15> /Users/dev/birdfeeder
    0x7fff5c48a000 -     0x7fff5c4a6fff  libdyld.dylib (551.4) <8e7a39b5-7c3e-3c4a-9e8b-4f0e3a4b6a1c> /usr/lib/system/libdyld.dylib
    0x7ff80009a000 -     0x7ff8000d3fff  libsystem_kernel.dylib x86_64  <0d7a5c3e1f9b4e8db2a6c4e6f8a0b257> /usr/lib/system/libsystem_kernel.dylib
"""

APPLE_ARM64 = """\
Incident Identifier: 0D4E1C2B-3A59-4B7E-9C2D-1E0F3A4B5C6D
Hardware Model:      iPhone14,2
Process:             Birdwatch [4242]
Identifier:          org.birdwatch.app
Code Type:           ARM-64 (Native)
Date/Time:           2026-01-01 00:00:00.000 +0000
OS Version:          iPhone OS 17.2 (21C62)

Exception Type:  EXC_CRASH (SIGABRT)
Exception Message: unexpectedly found nil
Triggered by Thread:  0

Thread 0 name:  Dispatch queue: com.apple.main-thread
Thread 0 Crashed:
0   Birdwatch                     0x0000000100001f3a 0x100000000 + 7994
1   Birdwatch                     0x0000000100001e10 0x100000000 + 7696

Thread 0 crashed with ARM Thread State (64-bit):
    x0: 0x0000000000000000   x1: 0x0000000000000001    fp: 0x000000016fdff0e0    lr: 0x0000000100001e10
    sp: 0x000000016fdff0c0   pc: 0x0000000100001f3a  cpsr: 0x60000000

Binary Images:
       0x100000000 -        0x100003fff Birdwatch arm64  <6f1c2a9e4b7d4c1e8a3f2d5e7b9c0a41> /private/var/containers/Bundle/Application/Birdwatch.app/Birdwatch
"""


def crash_files():
    for variant in ["fp", "nofp"]:
        write("minidump", f"crash-{variant}.dmp", fixture(f"minidump/{variant}/crash.dmp"))
    write("minidump", "header-only", b"MDMP\x93\xa7\x00\x00" + b"\x00" * 24)
    write("apple_crash_report", "x86_64.crash", APPLE_X86)
    write("apple_crash_report", "arm64.crash", APPLE_ARM64)


# ------------------------------------------------------------------- multipart

def part(name, data, filename=None):
    head = b'Content-Disposition: form-data; name="' + name.encode() + b'"'
    if filename:
        head += b'; filename="' + filename.encode() + b'"\r\nContent-Type: application/octet-stream'
    return b"--" + BOUNDARY + b"\r\n" + head + b"\r\n\r\n" + data + b"\r\n"


def form(*parts):
    return b"".join(parts) + b"--" + BOUNDARY + b"--\r\n"


def multipart():
    sources = json.dumps([{"type": "http", "id": "s", "url": "https://symbols.example/"}]).encode()
    options = b'{"dif_candidates": true, "apply_source_context": false}'
    rewrite = b'[{"from": "^/lib/(.*)$", "to": "/usr/lib/$1"}]'
    small_dump = b"MDMP\x93\xa7\x00\x00" + b"\x00" * 56
    # First byte: bit 0 is the endpoint (0: /minidump), the rest the chunk size.
    write("multipart", "minidump", b"\x00" + form(
        part("upload_file_minidump", small_dump, "upload.dmp"),
        part("sources", sources),
        part("options", options),
        part("rewrite_first_module", rewrite),
    ))
    write("multipart", "minidump-gzip-chunked", b"\x0e" + form(
        part("options", options),
        part("upload_file_minidump", gzip_bytes(small_dump * 8), "upload.dmp.gz"),
        part("unknown", b"ignored"),
    ))
    # Past the target's 16 KiB file limit.
    write("multipart", "minidump-too-large", b"\x40" + form(
        part("upload_file_minidump", fixture("minidump/fp/crash.dmp"), "crash.dmp"),
    ))
    write("multipart", "apple", b"\x01" + form(
        part("sources", b"[]"),
        part("apple_crash_report", APPLE_ARM64.encode(), "report.crash"),
    ))
    write("multipart", "nested-form", b"\x00" + form(
        part("upload_file_minidump", form(part("upload_file_minidump", small_dump)), "x"),
    ))


# ------------------------------------------------------------------- debug files

def object_files():
    files = {
        "elf": "native/elf/crash",
        "elf-debug": "native/elf/crash.debug",
        "elf-stripped": "native/elf/crash.stripped",
        "elf-corrupt": "native/corrupt/crash.debug",
        "elf-embedded-sources": "native-embedded/crash.debug",
        "pe": "native/pe/crash.exe",
        "pdb": "native/pe/crash.pdb",
        "pdb-srcsrv": "native-srcsrv/crash.pdb",
        "breakpad.sym": "native/breakpad/crash.sym",
        "breakpad-pe.sym": "native/breakpad/crash_pe.sym",
        "source-bundle.src.zip": "minidump/fp/crash.src.zip",
    }
    for name, path in files.items():
        write("object_file", name, fixture(path))
    # A Wasm module with a build id section and nothing else.
    build_id = bytes.fromhex("bda18fd85d4a4eb893022d6bfad846b1")
    name = b"build_id"
    custom = bytes([len(name)]) + name + bytes([len(build_id)]) + build_id
    write("object_file", "wasm", b"\0asm\x01\0\0\0" + b"\x00" + bytes([len(custom)]) + custom)


def objcopy(args, data):
    """`data` through binutils' objcopy with `args`; None when objcopy cannot."""
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "in", Path(tmp) / "out"
        src.write_bytes(data)
        done = subprocess.run(["objcopy", *args, str(src), str(dst)], capture_output=True)
        return dst.read_bytes() if done.returncode == 0 else None


def elf64_sections(elf):
    """(name, header offset, section offset, size) of each section of a little-endian ELF64."""
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    headers = [shoff + i * shentsize for i in range(shnum)]
    strtab_off, = struct.unpack_from("<Q", elf, headers[shstrndx] + 0x18)
    out = []
    for at in headers:
        name_off, = struct.unpack_from("<I", elf, at)
        offset, size = struct.unpack_from("<QQ", elf, at + 0x18)
        end = elf.index(b"\0", strtab_off + name_off)
        out.append((elf[strtab_off + name_off:end].decode(), at, offset, size))
    return out


def lazy_open():
    debug = fixture("native/elf/crash.debug")
    write("lazy_open", "elf-debug", debug)
    for style in ["zlib", "zlib-gnu", "zstd"]:
        compressed = objcopy([f"--compress-debug-sections={style}"], debug)
        if compressed:
            write("lazy_open", f"elf-{style}", compressed)
    # `.debug_info` whose compression header (Elf64_Chdr) claims 1 TiB: refused unread.
    claims = bytearray(objcopy(["--compress-debug-sections=zlib"], debug))
    for name, _, offset, _ in elf64_sections(claims):
        if name == ".debug_info":
            struct.pack_into("<Q", claims, offset + 8, 1 << 40)
    write("lazy_open", "elf-claims-1tib", bytes(claims))
    # `.zdebug_str` that truly inflates 2 MiB of zeros from a few KiB: past the ratio
    # and the target's 1 MiB floor.
    zeros = b"ZLIB" + struct.pack(">Q", 2 << 20) + zlib.compress(bytes(2 << 20), 9)
    with tempfile.TemporaryDirectory() as tmp:
        payload = Path(tmp) / "zdebug_str"
        payload.write_bytes(zeros)
        bomb = objcopy(["--remove-section=.debug_str",
                        f"--add-section=.zdebug_str={payload}"], debug)
    write("lazy_open", "elf-zdebug-bomb", bomb)
    write("lazy_open", "pdb", fixture("native/pe/crash.pdb"))


# ------------------------------------------------------------------- fetching

def symstore_index():
    segment = (
        '"igdail32.dll\\5BA3F2382a000","D:\\temp\\igdail32.dll"\r\n'
        '"app.pdb\\3249D99D0C4049318610F4E4FB0B69361","C:\\build\\app.pdb"\r\n'
        "garbage line\r\n"
    )
    write("symstore_index", "two-segments", "0000000002\r\n\0" + segment + "\0" + '"a.exe\\5AB380779000",""\n')
    write("symstore_index", "gap", "3\0\0" + segment)


def sentry_search():
    link = ('<https://sentry.example/api/0/projects/o/p/files/dsyms/?cursor=100:1:0>; rel="next"; '
            'results="true"; cursor="100:1:0", <https://sentry.example/api/0/x>; rel="previous"; '
            'results="false"')
    answer = [
        {"id": "42", "uuid": "u", "debugId": "c0bcc3f1-9827-fe65-3058-404b2831d9e6", "codeId": None,
         "symbolType": "elf", "headers": {"Content-Type": "application/x-elf-binary"},
         "size": 10, "sha1": "s", "dateCreated": "2024-01-01T00:00:00Z", "data": {"features": ["debug"]}},
        {"id": 7},
    ]
    write("sentry_search", "page", link + "\n" + json.dumps(answer))
    write("sentry_search", "last-page", '<https://evil.example/next>; rel="next"; results="true"\n[]')


def cab(payload, name=b"crash.pdb", compress=False):
    """A single-folder, single-file CAB: stored, or MSZIP ("CK" + raw deflate per block)."""
    blocks = []
    for start in range(0, max(len(payload), 1), 0x8000):
        chunk = payload[start:start + 0x8000]
        if compress:
            deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
            data = b"CK" + deflate.compress(chunk) + deflate.flush()
        else:
            data = chunk
        blocks.append(struct.pack("<IHH", 0, len(data), len(chunk)) + data)
    header_size, folder_size = 36, 8
    cffile = struct.pack("<IIHHHH", len(payload), 0, 0, 0x5821, 0, 0x20) + name + b"\0"
    coff_files = header_size + folder_size
    coff_data = coff_files + len(cffile)
    data = b"".join(blocks)
    total = coff_data + len(data)
    header = b"MSCF" + struct.pack("<IIIIIBBHHHHH", 0, total, 0, coff_files, 0, 3, 1, 1, 1, 0, 0, 0)
    folder = struct.pack("<IHH", coff_data, len(blocks), 1 if compress else 0)
    return header + folder + cffile + data


def decompress():
    payload = fixture("native/breakpad/crash.sym")
    write("decompress", "gzip", gzip_bytes(payload))
    write("decompress", "zlib", zlib.compress(payload, 9))
    write("decompress", "bzip2", bz2.compress(payload, 9))
    write("decompress", "xz", lzma.compress(payload))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(zipfile.ZipInfo("dir/"), b"")
        z.writestr(zipfile.ZipInfo("dir/crash.sym", (1980, 1, 1, 0, 0, 0)), payload)
    write("decompress", "zip", buf.getvalue())
    write("decompress", "cab-stored", cab(payload))
    write("decompress", "cab-mszip", cab(payload * 12, compress=True))
    # Bombs: a few KiB that unpack past the target's 1 MiB limit.
    write("decompress", "gzip-bomb", gzip_bytes(b"\0" * (2 * 1024 * 1024)))
    write("decompress", "bzip2-bomb", bz2.compress(b"\0" * (2 * 1024 * 1024)))
    write("decompress", "plain", payload[:256])
    if shutil.which("zstd"):
        for name, data in [("zstd", payload), ("zstd-bomb", b"\0" * (2 * 1024 * 1024))]:
            out = subprocess.run(["zstd", "-q", "-c", "-19", "--no-check"], input=data,
                                 stdout=subprocess.PIPE, check=True).stdout
            write("decompress", name, out)
    else:
        print("zstd not found: no zstd seeds")


# ------------------------------------------------------------------- JS

def sourcemap():
    dist = FIXTURES / "js" / "dist"
    for script in ["app", "debugid", "nocontent"]:
        minified = (dist / f"{script}.min.js").read_bytes()
        sourcemap = (dist / f"{script}.min.js.map").read_bytes()
        write("sourcemap", script, minified + b"\0" + sourcemap)
    # Its map is a `data:` URL inside the script.
    write("sourcemap", "inline", (dist / "inline.min.js").read_bytes())


def bundle(entries, compression=zipfile.ZIP_DEFLATED):
    """A source bundle as symbolic writes one: the SYSB header, then a zip with a manifest."""
    buf = io.BytesIO()
    buf.write(b"SYSB" + struct.pack("<I", 2))
    files = {}
    with zipfile.ZipFile(buf, "a", compression) as z:
        for path, info, contents in entries:
            zip_path = "files/" + path
            files[zip_path] = info
            z.writestr(zipfile.ZipInfo(zip_path, (1980, 1, 1, 0, 0, 0)), contents)
        manifest = json.dumps({"files": files, "org": "o", "release": "1.0"}).encode()
        z.writestr(zipfile.ZipInfo("manifest.json", (1980, 1, 1, 0, 0, 0)), manifest)
    return buf.getvalue()


def artifact_bundle():
    dist = FIXTURES / "js" / "dist"
    minified = (dist / "app.min.js").read_bytes()
    sourcemap = (dist / "app.min.js.map").read_bytes()
    url = "~/static/app.min.js"
    by_reference = [
        ("_/_/static/app.min.js", {"type": "minified_source", "url": url,
                                   "headers": {"Sourcemap": "app.min.js.map"}}, minified),
        ("_/_/static/app.min.js.map", {"type": "source_map", "url": url + ".map"}, sourcemap),
    ]
    write("artifact_bundle", "by-url", bundle(by_reference))
    write("artifact_bundle", "by-url-stored", bundle(by_reference, zipfile.ZIP_STORED))
    by_debug_id = [
        ("_/_/a.js", {"type": "minified_source", "url": "~/a.js",
                      "headers": {"debug-id": BUNDLE_DEBUG_ID}}, minified),
        ("_/_/a.js.map", {"type": "source_map", "url": "~/a.js.map",
                          "headers": {"debug-id": BUNDLE_DEBUG_ID}}, sourcemap),
    ]
    write("artifact_bundle", "by-debug-id", bundle(by_debug_id, zipfile.ZIP_STORED))
    inline = (dist / "inline.min.js").read_bytes()
    write("artifact_bundle", "inline-map", bundle([
        ("_/_/static/app.min.js", {"type": "minified_source", "url": url}, inline),
    ], zipfile.ZIP_STORED))


# ------------------------------------------------------------------- symbfile uploads

def varint(value):
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def sym_record(ty, body):
    return varint(len(body)) + varint(ty) + body


def sym_field(number, wire, payload):
    return varint(number << 3 | wire) + payload


def sym_bytes(number, data):
    return sym_field(number, 2, varint(len(data)) + data)


def sym_file(*records):
    return b"symbfile" + sym_record(1, b"") + b"".join(records)


def sym_strings(*strings):
    return sym_record(4, b"".join(sym_bytes(1, s.encode()) for s in strings))


def sym_range(start, length, depth, func, line=0, call_line=0, relative=False):
    body = sym_field(1, 0, varint(start << 1)) if relative else sym_field(12, 0, varint(start))
    body += sym_field(2, 0, varint(length)) + sym_field(9, 0, varint(func))
    body += sym_field(10, 0, varint(1)) + sym_field(5, 0, varint(call_line))
    body += sym_field(7, 0, varint(depth))
    body += sym_bytes(8, sym_bytes(1, varint(0) + varint(4)) + sym_bytes(2, varint(line) + varint(line + 1)))
    return sym_record(2, body)


def sym_pad(addr, frames):
    packed = lambda values: b"".join(varint(v) for v in values)
    body = sym_field(5, 0, varint(addr))
    body += sym_bytes(2, packed([f % 3 for f in range(frames)]))
    body += sym_bytes(3, packed([1] * frames))
    body += sym_bytes(4, packed(range(1, frames + 1)))
    return sym_record(3, body)


def symbfile():
    """Control byte (see fuzz_targets/symbfile.rs), then a symbfile."""
    ranges = fixture("symbfile/ranges.symbfile")
    pads = fixture("symbfile/returnpads.symbfile")
    write("symbfile", "ranges", b"\x00" + ranges)
    write("symbfile", "ranges-3-parts-16-byte-chunks", b"\x02" + ranges)
    write("symbfile", "returnpads-2-parts", b"\x05" + pads)
    write("symbfile", "both-kinds", b"\x58" + ranges)
    strings = sym_strings("main", "a.c", "inlined")
    nested = [sym_range(0x1000 + d, 0x100 - 2 * d, d, d % 3, 10 + d, 20 + d) for d in range(40)]
    write("symbfile", "nested-ranges", b"\x08" + sym_file(strings, *nested))
    write("symbfile", "pads-at-the-limit", b"\x04" + sym_file(strings, sym_pad(0x2000, 128), sym_pad(0x2010, 3)))
    write("symbfile", "pad-too-deep", b"\x04" + sym_file(strings, sym_pad(0x2000, 129)))
    relative = [sym_range(0x10, 8, 0, 0, 5), sym_range(4, 2, 1, 2, 6, 7, relative=True)]
    write("symbfile", "relative-and-two-files", b"\x01" + sym_file(strings, *relative) + sym_file(strings, sym_pad(0x3000, 2)))


# ------------------------------------------------------------------- JVM

def mozilla_body():
    # First byte: even for /symbolicate/v5, odd for v4; bit 1 asks for the debug block.
    memory_map = [["xul.pdb", "44E4EC8C2F41492B9369D6B9A059577C2"],
                  ["libc.so.6", "0123456789ABCDEF0123456789ABCDEF0"], ["", ""]]
    stacks = [[[0, 11723767], [1, 65802], [-1, 4096], [2, -1], [0, -1]]]
    job = {"memoryMap": memory_map, "stacks": stacks}
    write("mozilla_body", "v5_jobs", b"\x02" + json.dumps({"jobs": [job, job]}).encode())
    write("mozilla_body", "v5_single", b"\x00" + json.dumps(job).encode())
    write("mozilla_body", "v4", b"\x01" + json.dumps(dict(job, version=4)).encode())
    write("mozilla_body", "v5_bad_index", b"\x00" + json.dumps(
        {"memoryMap": memory_map[:1], "stacks": [[[5, 1]]]}).encode())
    write("mozilla_body", "v5_too_many_jobs", b"\x00" + json.dumps({"jobs": [job] * 11}).encode())


def proguard():
    for mapping in sorted((FIXTURES / "jvm").glob("*.txt")):
        write("proguard", mapping.stem, mapping.read_bytes())


def main():
    makers = {
        "symbolicate_json": symbolicate_json,
        "minidump": crash_files,
        "apple_crash_report": None,
        "multipart": multipart,
        "object_file": object_files,
        "lazy_open": lazy_open,
        "symstore_index": symstore_index,
        "sentry_search": sentry_search,
        "decompress": decompress,
        "sourcemap": sourcemap,
        "artifact_bundle": artifact_bundle,
        "proguard": proguard,
        "mozilla_body": mozilla_body,
        "symbfile": symbfile,
    }
    for target in makers:
        shutil.rmtree(CORPUS / target, ignore_errors=True)
        (CORPUS / target).mkdir(parents=True)
    for make in makers.values():
        if make:
            make()
    total = sum(f.stat().st_size for f in CORPUS.rglob("*") if f.is_file())
    print(f"seeds: {sum(1 for f in CORPUS.rglob('*') if f.is_file())} files, {total} bytes")


if __name__ == "__main__":
    main()
