#!/usr/bin/env python3
"""Writes a large, realistic Linux x86_64 minidump and the Breakpad symbols for it, the
same on every run for a given --seed and sizes: the input of
scripts/large-minidump-bench.sh and of the large-dump test in tests/integration.

A crashed process with --modules (160) modules and --threads (40) threads. Every module
has a GNU build id (a `BpEL` CodeView record) and a Breakpad `.sym` file, written in the
`native` layout of a filesystem source (`<name>/<BREAKPAD_ID>/<name>.sym`, where both
omnisym and upstream Symbolicator look for a Linux module's Breakpad file). The .sym
files are what `dump_syms` writes: FILE, INLINE_ORIGIN, FUNC with INLINE and line
records, PUBLIC, and STACK CFI INIT / STACK CFI rules for every function. --large (4) of
the modules get .sym files of about 0.5, 0.8, 1.2 and 1.5 times --large-mib (40) MiB;
the others are around --small-kib (200) KiB.

Every thread has a real stack in the dump's memory: frames 10 to 30 deep (--min-frames,
--max-frames) through several modules, each frame laid out as its function's CFI says
(return address at CFA-8, the caller's rbp or rbx saved below it), ending in a return
address of 0. A stack walker that follows the STACK CFI rules gets back exactly the
generated frames; none of them needs stack scanning. One thread (not the main one when
there are two or more) crashed with SIGSEGV and has the exception stream.

Outputs in OUT_DIR: crash.dmp; symbols/ (the source's root); expected.json, which says
per thread which frames the walk must find and what each symbolicates to (innermost
function first, inlinees included), and per module its ids, .sym size and whether any
frame is in it.

Usage: gen-large-minidump.py OUT_DIR [--seed N] [--modules N] [--threads N]
       [--large N] [--large-mib M] [--small-kib K] [--min-frames N] [--max-frames N]
       gen-large-minidump.py OUT_DIR --check ANSWER.json
The second form compares a server's answer with OUT_DIR/expected.json, prints the first
differences and their count, and exits 1 if there are any.
"""

import argparse
import array
import json
import os
import random
import struct
import sys

PAGE = 0x1000
# Roughly the .sym text of one function (FUNC, lines, STACK CFI; the output averages
# 300-370 bytes). It only sizes the FILE and INLINE_ORIGIN pools and how many functions
# are laid out before the budget stops the writing, so it need not be exact.
SYM_BYTES_PER_FUNCTION = 300

# ------------------------------------------------------------------------ names

NAMESPACES = (
    "base", "core", "dom", "gfx", "layers", "layout", "media", "net", "ipc", "js",
    "style", "text", "font", "image", "storage", "crypto", "audio", "rtc", "widget",
    "sched", "task", "db", "render", "a11y", "xml", "url", "cache", "hal", "gl", "ui",
)
NOUNS = (
    "Frame", "Node", "Buffer", "Channel", "Request", "Stream", "Surface", "Texture",
    "Layer", "Task", "Thread", "Event", "Message", "Document", "Element", "Shape",
    "Glyph", "Font", "Cache", "Pool", "Queue", "Timer", "Socket", "Session", "Context",
    "Device", "Decoder", "Encoder", "Parser", "Writer", "Reader", "Builder", "Manager",
    "Service", "Handler", "Observer", "Listener", "Worker", "Runner", "Scheduler",
    "Allocator", "Tracker", "Registry", "Resolver", "Loader", "Painter", "Compositor",
    "Animator", "Transaction", "Dispatcher", "Atlas", "Tile", "Region", "Rect",
    "Selector", "Rule", "Sheet", "Script", "Realm", "Zone", "Arena", "Heap",
)
VERBS = (
    "Init", "Run", "Process", "Handle", "Dispatch", "Update", "Flush", "Resolve",
    "Paint", "Build", "Reflow", "Compute", "Notify", "Schedule", "Post", "Read",
    "Write", "Open", "Close", "Decode", "Encode", "Parse", "Serialize", "Append",
    "Insert", "Remove", "Lookup", "Visit", "Traverse", "Layout", "Composite", "Submit",
    "Wait", "Signal", "Acquire", "Release", "Grow", "Shrink", "Clear", "Reset",
    "Collect", "Mark", "Sweep", "Trace", "Measure", "Apply", "Cancel", "Complete",
)
PARAMS = (
    "", "", "int", "unsigned int", "unsigned long", "bool", "double", "char const*",
    "void*", "std::string const&", "std::vector<int, std::allocator<int> > const&",
    "unsigned char const*, unsigned long", "int, int", "float, float, float",
)
C_VERBS = (
    "new", "free", "init", "get", "set", "read", "write", "flush", "dispatch", "emit",
    "lookup", "insert", "remove", "iterate", "poll", "wait", "signal", "parse", "copy",
    "find", "append", "unref", "ref", "connect", "process", "queue", "push", "pop",
)
C_NOUNS = (
    "buffer", "context", "source", "object", "value", "list", "hash", "table", "string",
    "stream", "event", "queue", "node", "closure", "signal", "array", "slice", "pool",
    "cursor", "window", "display", "surface", "atom", "font", "glyph", "pattern",
)
SYSTEM_LIBS = (
    "ld-linux-x86-64.so.2", "libm.so.6", "libstdc++.so.6", "libgcc_s.so.1", "libz.so.1",
    "libglib-2.0.so.0", "libgobject-2.0.so.0", "libgio-2.0.so.0", "libgtk-3.so.0",
    "libgdk-3.so.0", "libpango-1.0.so.0", "libcairo.so.2", "libfontconfig.so.1",
    "libfreetype.so.6", "libexpat.so.1", "libffi.so.8", "libpcre2-8.so.0",
    "libX11.so.6", "libxcb.so.1", "libdbus-1.so.3", "libasound.so.2", "libdrm.so.2",
    "libEGL.so.1", "libGLX.so.0", "libharfbuzz.so.0", "libpng16.so.16",
)
SYLLABLES = (
    "xul", "gfx", "net", "moz", "nss", "sql", "ite", "plc", "plds", "nspr", "soft",
    "tok", "lgpl", "ipc", "dom", "js", "wasm", "av", "codec", "vpx", "opus", "web",
    "rtc", "gl", "vk", "skia", "cairo", "font", "icu", "uc", "i18n", "pdf", "img",
    "jpeg", "png", "zip", "brot", "li", "zst", "crash", "report", "mozgtk", "wayland",
    "sandbox", "plugin", "media", "audio", "cubeb", "ffmpeg", "dav1d", "aom",
)

# libc functions a stack starts or ends in: where a thread's frames begin (clone,
# start_thread; _start and __libc_start_main for the main thread) and where an idle
# thread waits.
LIBC_FUNCTIONS = (
    "__clone3", "start_thread", "__libc_start_call_main", "__libc_start_main_impl",
    "__futex_abstimed_wait_common", "___pthread_cond_wait", "__GI___poll",
    "__GI_epoll_wait", "__GI___libc_read", "__GI___nanosleep", "__sleep",
    "__GI___pthread_mutex_lock", "__lll_lock_wait",
)
IDLE_TOPS = (
    ("__futex_abstimed_wait_common", "___pthread_cond_wait"),
    ("__futex_abstimed_wait_common", "___pthread_cond_wait"),
    ("__GI_epoll_wait",),
    ("__GI___libc_read",),
    ("__GI___nanosleep", "__sleep"),
    ("__lll_lock_wait", "__GI___pthread_mutex_lock"),
    ("__GI___poll",),
)
EXE_FUNCTIONS = ("_start", "main")


def debug_id_of(build_id):
    """The debug id of a GNU build id: its first 16 bytes as a little-endian GUID."""
    b = build_id[:16].ljust(16, b"\0")
    guid = b[3::-1] + b[5:3:-1] + b[7:5:-1] + b[8:]
    h = guid.hex()
    return "%s-%s-%s-%s-%s" % (h[:8], h[8:12], h[12:16], h[16:20], h[20:])


# ------------------------------------------------------------------------ modules


class Module:
    """One mapped file: its ids, where it is, its functions (start and size of each,
    in arrays; everything else about function i comes from `describe`)."""

    def __init__(self, index, path, style, budget, rng):
        self.index = index
        self.path = path
        self.name = os.path.basename(path)
        self.style = style  # "cpp" or "c"
        self.budget = budget  # bytes of .sym text
        self.seed = rng.getrandbits(48)
        self.build_id = bytes(rng.getrandbits(8) for _ in range(20))
        self.code_id = self.build_id.hex()
        self.debug_id = debug_id_of(self.build_id)
        self.breakpad_id = self.debug_id.replace("-", "").upper() + "0"
        self.starts = array.array("Q")
        self.sizes = array.array("I")
        self.publics = []
        self.special = ()
        self.on_stack = False
        estimate = max(8, budget // SYM_BYTES_PER_FUNCTION)
        self.pools(random.Random(self.seed), estimate)

    def pools(self, rng, functions):
        """The names a module's functions, files and inline origins are made of."""
        if self.style == "cpp":
            root = self.name.split(".")[0].removeprefix("lib")
            self.classes = ["%s::%s%s" % (rng.choice(NAMESPACES), rng.choice(NOUNS),
                                          rng.choice(("", "", "Impl", "Base", "Child", "Parent",
                                                      "Proxy", "Host", "Client", "Wrapper")))
                            for _ in range(max(4, functions // 24))]
            self.files = ["/build/app/%s/src/%s.cpp" % (root, c.replace("::", "/"))
                          for c in self.classes]
            self.files += ["/build/app/%s/src/%s.h" % (root, c.replace("::", "/"))
                           for c in self.classes[: max(1, len(self.classes) // 3)]]
            helpers = ("Get%s() const", "Is%s() const", "operator[](unsigned long)",
                       "%sRef::operator->() const", "Has%s() const", "As%s()")
            self.origins = []
            for _ in range(max(2, functions // 16)):
                c = rng.choice(self.classes)
                h = rng.choice(helpers)
                self.origins.append("%s::%s" % (c, h % rng.choice(NOUNS) if "%s" in h else h))
        else:
            prefix = self.name.split(".")[0].removeprefix("lib").replace("-", "_").replace("+", "p")
            self.classes = ["%s_%s" % (prefix, rng.choice(C_NOUNS)) for _ in range(max(4, functions // 24))]
            self.files = ["/build/%s/src/%s.c" % (self.name.split(".so")[0], c) for c in self.classes]
            self.origins = ["%s_%s_inline" % (rng.choice(self.classes), rng.choice(C_VERBS))
                            for _ in range(max(2, functions // 16))]

    def layout(self, rng, count):
        """Places `count` functions (and a few PUBLIC-only stubs between them) from the
        start of the text segment."""
        addr = 0x2000 + PAGE * rng.randrange(4)
        for i in range(count):
            if i > len(self.special) and rng.random() < 0.01:
                self.publics.append((addr, "%s_stub_%d" % (self.classes[0].replace("::", "_"), i)))
                addr += 16 * rng.randrange(1, 5)
            size = min(12000, max(24, int(rng.lognormvariate(5.2, 0.9))))
            self.starts.append(addr)
            self.sizes.append(size)
            addr = (addr + size + 15) & ~15

    def name_of(self, rng, i):
        if i < len(self.special):
            return self.special[i]
        c = rng.choice(self.classes)
        if self.style == "c":
            return "%s_%s" % (c, rng.choice(C_VERBS))
        method = rng.choice(VERBS) + rng.choice(("", "", "", "Data", "Children", "Style",
                                                  "Range", "Rect", "Now", "Async", "Locked"))
        roll = rng.random()
        if roll < 0.08:
            return "%s::%s(%s)::{lambda()#%d}::operator()() const" % (
                c, method, rng.choice(PARAMS), rng.randrange(1, 4))
        if roll < 0.2:
            ns, cls = c.split("::")
            return "%s::%s<%s>::%s(%s)" % (ns, cls, rng.choice(self.classes), method, rng.choice(PARAMS))
        return "%s::%s(%s)%s" % (c, method, rng.choice(PARAMS), " const" if roll > 0.9 else "")


class Function:
    """Everything the .sym file says about one function, and its frame's shape."""

    __slots__ = ("start", "end", "name", "fp", "extent", "body", "lines", "file",
                 "inline", "cfi")


def describe(m, i):
    """Function i of module m. The same for a given seed whichever functions are asked
    for, so the stacks can name functions after their module's .sym is written."""
    rng = random.Random(m.seed * 1_000_003 + i)
    f = Function()
    start, size = m.starts[i], m.sizes[i]
    end = start + size
    f.start, f.end = start, end
    f.name = m.name_of(rng, i)
    # A frame-pointer function: push rbp; mov rbp,rsp; ... leave; ret. Otherwise:
    # push rbx; sub rsp,N; ... add rsp,N; pop rbx; ret. f.extent is how far below the
    # CFA the body's rsp is; the ABI keeps both 16-byte aligned.
    f.fp = rng.random() < 0.3
    # Most frames are small; one in ten holds a buffer of a few KiB.
    locals_ = 16 * (rng.randrange(64, 512) if rng.random() < 0.1 else min(63, int(rng.expovariate(1 / 5))))
    f.extent = 16 + locals_
    if f.fp:
        f.body = (start + 4, end - 1)
        f.cfi = ("STACK CFI INIT %x %x .cfa: $rsp 8 + .ra: .cfa -8 + ^\n"
                 "STACK CFI %x .cfa: $rsp 16 + $rbp: .cfa -16 + ^\n"
                 "STACK CFI %x .cfa: $rbp 16 +\n"
                 "STACK CFI %x .cfa: $rsp 8 +\n" % (start, size, start + 1, start + 4, end - 1))
    else:
        if f.extent == 16:
            f.body = (start + 1, end - 1)
            f.cfi = ("STACK CFI INIT %x %x .cfa: $rsp 8 + .ra: .cfa -8 + ^\n"
                     "STACK CFI %x .cfa: $rsp 16 + $rbx: .cfa -16 + ^\n"
                     "STACK CFI %x .cfa: $rsp 8 +\n" % (start, size, start + 1, end - 1))
        else:
            f.body = (start + 5, end - 2)
            f.cfi = ("STACK CFI INIT %x %x .cfa: $rsp 8 + .ra: .cfa -8 + ^\n"
                     "STACK CFI %x .cfa: $rsp 16 + $rbx: .cfa -16 + ^\n"
                     "STACK CFI %x .cfa: $rsp %d +\n"
                     "STACK CFI %x .cfa: $rsp 16 +\n"
                     "STACK CFI %x .cfa: $rsp 8 +\n"
                     % (start, size, start + 1, start + 5, f.extent, end - 2, end - 1))
    # Line records: the function's own file, lines mostly rising from its first.
    count = max(1, min(24, size // rng.randrange(20, 90)))
    cuts = sorted(rng.sample(range(start + 1, end), count - 1)) if count > 1 else []
    edges = [start] + cuts + [end]
    f.file = (i * 7 + rng.randrange(3)) % len(m.files)
    line = 20 + rng.randrange(4000)
    f.lines = []
    for a, b in zip(edges, edges[1:]):
        f.lines.append([a, b - a, line, f.file])
        line = max(1, line + rng.randrange(-3, 9))
    # An inlined call: a run of line records in the inlinee's file and lines.
    f.inline = None
    if count >= 4 and rng.random() < 0.25:
        first = rng.randrange(1, count - 2)
        last = min(count - 2, first + rng.randrange(3))
        origin = rng.randrange(len(m.origins))
        ofile = rng.randrange(len(m.files))
        oline = 10 + rng.randrange(800)
        call_line = f.lines[first - 1][2]
        for rec in f.lines[first:last + 1]:
            rec[2], rec[3] = oline, ofile
            oline += rng.randrange(0, 3)
        lo = f.lines[first][0]
        hi = f.lines[last][0] + f.lines[last][1]
        f.inline = (lo, hi, origin, call_line)
    return f


def render(m, f):
    """FUNC with its INLINE and line records."""
    out = ["FUNC %x %x 0 %s\n" % (f.start, f.end - f.start, f.name)]
    if f.inline:
        lo, hi, origin, call_line = f.inline
        out.append("INLINE 0 %d %d %d %x %x\n" % (call_line, f.file, origin, lo, hi - lo))
    out.extend("%x %x %d %d\n" % tuple(rec) for rec in f.lines)
    return "".join(out)


def symbolicated(m, f, addr):
    """What a symbolicator makes of `addr` (the address it looks up) in f: functions and
    lines, innermost first."""
    rec = next(r for r in f.lines if r[0] <= addr < r[0] + r[1])
    if f.inline and f.inline[0] <= addr < f.inline[1]:
        return [m.origins[f.inline[2]], f.name], [rec[2], f.inline[3]]
    return [f.name], [rec[2]]


def write_sym(m, root, rng):
    """Writes m's .sym file until its budget is spent; lays its functions out as it
    goes. Returns the file's size."""
    d = os.path.join(root, m.name, m.breakpad_id)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, m.name + ".sym")
    m.sym = os.path.relpath(path, root)
    # The layout needs the function count first; it is found by writing functions
    # until the budget is reached, over-provisioned and trimmed.
    planned = max(len(m.special) + 4, 2 * m.budget // SYM_BYTES_PER_FUNCTION + 16)
    m.layout(rng, planned)
    head = ["MODULE Linux x86_64 %s %s\n" % (m.breakpad_id, m.name),
            "INFO CODE_ID %s\n" % m.code_id.upper(),
            "INFO GENERATOR omnisym scripts/gen-large-minidump.py\n"]
    head += ["FILE %d %s\n" % (n, p) for n, p in enumerate(m.files)]
    head += ["INLINE_ORIGIN %d %s\n" % (n, o) for n, o in enumerate(m.origins)]
    written = 0
    cfi = []
    with open(path, "w") as out:
        chunk = "".join(head)
        out.write(chunk)
        written += len(chunk)
        i, batch = 0, []
        while i < planned and (written < m.budget or i < len(m.special) + 4):
            f = describe(m, i)
            text = render(m, f)
            batch.append(text)
            cfi.append(f.cfi)
            written += len(text) + len(f.cfi)
            i += 1
            if len(batch) >= 4096:
                out.write("".join(batch))
                batch = []
        out.write("".join(batch))
        del m.starts[i:], m.sizes[i:]
        last = m.starts[-1] + m.sizes[-1]
        m.publics = [p for p in m.publics if p[0] < last]
        m.image_size = ((last + PAGE - 1) & ~(PAGE - 1)) + PAGE * rng.randrange(2, 64)
        out.write("".join("PUBLIC %x 0 %s\n" % p for p in m.publics))
        for n in range(0, len(cfi), 4096):
            out.write("".join(cfi[n:n + 4096]))
    return os.path.getsize(path)


def make_modules(args, rng):
    """The process's modules, in address order: the executable, libc, system
    libraries, then the application's libraries, --large of them big."""
    app = rng.choice(("navigator", "studio", "mailer", "viewer", "player"))
    specs = [("/opt/%s/%s-bin" % (app, app), "cpp"), ("/usr/lib/x86_64-linux-gnu/libc.so.6", "c")]
    system = list(SYSTEM_LIBS)
    rng.shuffle(system)
    others = args.modules - 2
    n_system = min(len(system), others // 4)
    specs += [("/usr/lib/x86_64-linux-gnu/" + n, "cpp" if "++" in n else "c") for n in system[:n_system]]
    names = set()
    while len(names) < others - n_system:
        parts = rng.sample(SYLLABLES, rng.choice((1, 1, 2)))
        names.add("lib%s.so" % "".join(parts))
    app_libs = sorted(names)
    rng.shuffle(app_libs)
    specs += [("/opt/%s/%s" % (app, n), "cpp") for n in app_libs]
    large_at = list(range(len(specs) - len(app_libs), len(specs)))[: args.large]
    factors = (0.5, 0.8, 1.2, 1.5)
    modules = []
    for index, (path, style) in enumerate(specs):
        if index in large_at:
            budget = int(args.large_mib * 1048576 * factors[large_at.index(index) % 4])
        else:
            budget = int(args.small_kib * 1024 * min(8.0, max(0.1, rng.lognormvariate(-0.3, 0.8))))
        m = Module(index, path, style, budget, rng)
        m.large = index in large_at
        modules.append(m)
    modules[0].special = EXE_FUNCTIONS
    modules[1].special = LIBC_FUNCTIONS
    return modules


def place(modules, rng):
    """Load addresses: the executable where a PIE goes, libraries from 0x7f.. up."""
    modules[0].base = 0x5500_0000_0000 + PAGE * rng.randrange(1 << 24)
    addr = 0x7f00_0000_0000 + PAGE * rng.randrange(1 << 24)
    for m in modules[1:]:
        m.base = addr
        addr = (addr + m.image_size + PAGE * rng.randrange(1, 512) + 0xfffff) & ~0xfffff


# ------------------------------------------------------------------------ stacks


class Frame:
    __slots__ = ("module", "fn", "pc", "context")


def pick_site(rng, f, context):
    """An address in f's body: the faulting or waiting instruction for the context
    frame, else a 5-byte call whose return address is still inside the body."""
    lo, hi = f.body
    if context:
        return lo + rng.randrange(hi - lo)
    return lo + rng.randrange(hi - 5 - lo + 1) + 5  # the return address


def frame(rng, m, fn_index, context):
    fr = Frame()
    fr.module = m
    fr.fn = describe(m, fn_index)
    fr.pc = m.base + pick_site(rng, fr.fn, context)
    fr.context = context
    return fr


def special(m, name):
    return (m, m.special.index(name))


def chain(modules, rng, count, first=None):
    """`count` frames of application code, innermost first, in runs through modules."""
    large = [m for m in modules if m.large] or modules[2:]
    middle = modules[2:] + [modules[0]]
    out = []
    m = first
    for _ in range(count):
        if m is None or rng.random() > 0.6:
            m = rng.choice(large) if rng.random() < 0.5 else rng.choice(middle)
        lo = len(m.special)
        out.append((m, lo + rng.randrange(len(m.starts) - lo)))
    return out


def make_threads(args, modules, rng):
    exe, libc = modules[0], modules[1]
    threads = []
    pid = 2000 + rng.randrange(60000)
    crashed = 0 if args.threads == 1 else 1 + rng.randrange(args.threads - 1)
    for t in range(args.threads):
        depth = rng.randint(args.min_frames, args.max_frames)
        if t == crashed:
            top = []
            bottom = [special(libc, "start_thread"),
                      special(libc, "__clone3")]
            first = rng.choice([m for m in modules if m.large] or modules[2:])
        else:
            top = [special(libc, n) for n in rng.choice(IDLE_TOPS)]
            first = None
            if t == 0:
                bottom = [special(exe, "main"),
                          special(libc, "__libc_start_call_main"),
                          special(libc, "__libc_start_main_impl"),
                          special(exe, "_start")]
            else:
                bottom = [special(libc, "start_thread"),
                          special(libc, "__clone3")]
        middle = chain(modules, rng, max(1, depth - len(top) - len(bottom)), first)
        spec = top + middle + bottom
        frames = [frame(rng, m, i, n == 0) for n, (m, i) in enumerate(spec)]
        for fr in frames:
            fr.module.on_stack = True
        threads.append({"id": pid if t == 0 else pid + 1 + t + rng.randrange(3),
                        "frames": frames, "crashed": t == crashed})
    # Thread ids rise, as the kernel hands them out.
    for t in range(1, len(threads)):
        threads[t]["id"] = max(threads[t]["id"], threads[t - 1]["id"] + 1)
    return threads


def filler(rng):
    """A stack word nobody points at: locals, spilled counters, heap pointers."""
    roll = rng.random()
    if roll < 0.45:
        return 0
    if roll < 0.7:
        return rng.randrange(1 << 16)
    if roll < 0.9:
        return 0x5600_0000_0000 + 8 * rng.randrange(1 << 32)
    return rng.getrandbits(64)


def build_stack(rng, thread, top_of_stack):
    """Lays the frames out as their CFI says, from the outermost down. Returns the
    stack memory (start address and bytes) and the context registers."""
    frames = thread["frames"]
    cfa = top_of_stack - 16 * rng.randrange(4, 64)
    words = {}  # address -> value
    rbp = 0
    rbx = filler(rng)
    # The outermost frame returns to 0: where every walker stops.
    ret = 0
    for fr in reversed(frames):
        f = fr.fn
        words[cfa - 8] = ret
        if f.fp:
            words[cfa - 16] = rbp
            rbp = cfa - 16
        else:
            words[cfa - 16] = rbx
            rbx = filler(rng)
        rsp = cfa - f.extent
        ret = fr.pc
        cfa = rsp
    rsp = cfa
    start = (rsp - 128) & ~(PAGE - 1)
    end = top_of_stack
    mem = bytearray()
    for a in range(start, end, 8):
        mem += struct.pack("<Q", words[a] if a in words else filler(rng))
    regs = {"rsp": rsp, "rbp": rbp, "rbx": rbx, "rip": frames[0].pc}
    return start, bytes(mem), regs


# ------------------------------------------------------------------------ minidump


class Dump:
    """A minidump under construction: blobs appended, their RVAs returned."""

    def __init__(self, streams):
        self.buf = bytearray(32 + 12 * streams)
        self.dir = []

    def add(self, data, align=8):
        while len(self.buf) % align:
            self.buf.append(0)
        rva = len(self.buf)
        self.buf += data
        return rva

    def string(self, text):
        raw = text.encode("utf-16-le")
        return self.add(struct.pack("<I", len(raw)) + raw + b"\0\0", 4)

    def stream(self, kind, data):
        self.dir.append((kind, len(data), self.add(data)))

    def finish(self, timestamp):
        struct.pack_into("<IIIIIIQ", self.buf, 0, 0x504D444D, 0xA793, len(self.dir), 32, 0,
                         timestamp, 0)
        for n, entry in enumerate(self.dir):
            struct.pack_into("<III", self.buf, 32 + 12 * n, *entry)
        return bytes(self.buf)


REGS = ("rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi",
        "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "rip")


def context(rng, regs):
    """A CONTEXT_AMD64 (0x4d0 bytes) with every register group valid."""
    ctx = bytearray(0x4D0)
    struct.pack_into("<II", ctx, 0x30, 0x0010001F, 0x1F80)  # flags: CONTEXT_ALL; mxcsr
    struct.pack_into("<HHHHHHI", ctx, 0x38, 0x33, 0, 0, 0, 0, 0x2B, 0x10246)
    for n, reg in enumerate(REGS):
        value = regs.get(reg, filler(rng))
        struct.pack_into("<Q", ctx, 0x78 + 8 * n, value)
    struct.pack_into("<HH", ctx, 0x100, 0x37F, 0)  # x87 control word
    struct.pack_into("<I", ctx, 0x100 + 24, 0x1F80)  # mxcsr in the save area
    return bytes(ctx)


def write_dump(path, modules, threads, rng, timestamp):
    d = Dump(streams=5)
    # System info: 8 cores of an x86_64 running Linux.
    csd = d.string("Linux 6.1.0-27-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.115-1 (2024-11-01) x86_64")
    cpu = b"GenuineIntel" + struct.pack("<III", 0x000906EA, 0xBFEBFBFF, 0)
    d.stream(7, struct.pack("<HHHBBIIIIIHH", 9, 6, 0x9E0A, 8, 0, 6, 1, 0, 0x8201, csd, 0, 0) + cpu)

    entries = []
    for m in modules:
        name = d.string(m.path)
        cv = d.add(struct.pack("<I", 0x4270454C) + m.build_id)
        entries.append(struct.pack("<QIIII", m.base, m.image_size, 0, 0, name)
                       + bytes(52) + struct.pack("<IIIIQQ", 24, cv, 0, 0, 0, 0))
    d.stream(4, struct.pack("<I", len(entries)) + b"".join(entries))

    thread_entries, memory, crash_ctx = [], [], None
    top = 0x7FFD_0000_0000 + PAGE * rng.randrange(1 << 20)
    for n, t in enumerate(threads):
        # The main thread's stack is at the top of the address space; the others are
        # mapped below the libraries, 8 MiB apart.
        stack_top = top if n == 0 else 0x7E00_0000_0000 + n * 0x80_0000 + 0x7F_F000
        start, mem, regs = build_stack(rng, t, stack_top)
        ctx = d.add(context(rng, regs), 16)
        mem_rva = d.add(mem, 16)
        desc = struct.pack("<QII", start, len(mem), mem_rva)
        memory.append(desc)
        teb = stack_top + 0x1000
        thread_entries.append(struct.pack("<IIIIQ", t["id"], 0, 0, 0, teb) + desc
                              + struct.pack("<II", 0x4D0, ctx))
        t["regs"] = regs
        if t["crashed"]:
            crash_ctx = ctx
            crash_tid = t["id"]
    d.stream(3, struct.pack("<I", len(thread_entries)) + b"".join(thread_entries))
    d.stream(5, struct.pack("<I", len(memory)) + b"".join(memory))

    # SIGSEGV / SEGV_MAPERR reading near NULL.
    fault = 8 * rng.randrange(1, 64)
    exception = struct.pack("<IIQQII", 11, 1, 0, fault, 0, 0) + bytes(8 * 15)
    d.stream(6, struct.pack("<II", crash_tid, 0) + exception + struct.pack("<II", 0x4D0, crash_ctx))
    with open(path, "wb") as out:
        out.write(d.finish(timestamp))
    return fault


# ------------------------------------------------------------------------ check


def check(out_dir, answer_path):
    """The differences between a /minidump answer and expected.json, one line each:
    threads by position, each input frame's symbolicated frames (grouped by
    `original_index`), and each module's debug and unwind status (found where a frame
    is, unused elsewhere)."""
    expected = json.load(open(os.path.join(out_dir, "expected.json")))
    answer = json.load(open(answer_path))
    diffs = []
    if answer.get("crash_reason") != expected["crash"]["reason"]:
        diffs.append("crash_reason %r, want %r" % (answer.get("crash_reason"), expected["crash"]["reason"]))
    threads = answer.get("stacktraces") or []
    if len(threads) != len(expected["threads"]):
        diffs.append("%d threads, want %d" % (len(threads), len(expected["threads"])))
    for got, want in zip(threads, expected["threads"]):
        tid = want["thread_id"]
        if got.get("thread_id") != tid or bool(got.get("is_requesting")) != want["crashed"]:
            diffs.append("thread %s: thread_id %s, is_requesting %s"
                         % (tid, got.get("thread_id"), got.get("is_requesting")))
            continue
        groups = {}
        for f in got.get("frames") or []:
            groups.setdefault(f.get("original_index"), []).append(f)
        if len(groups) != len(want["frames"]):
            diffs.append("thread %s: %d frames, want %d" % (tid, len(groups), len(want["frames"])))
        for n, w in enumerate(want["frames"]):
            g = groups.get(n, [])
            seen = ([f.get("function") for f in g], [f.get("lineno") for f in g],
                    g[0].get("instruction_addr") if g else None, g[0].get("trust") if g else None)
            if seen != (w["functions"], w["lines"], w["instruction_addr"], w["trust"]):
                diffs.append("thread %s frame %d: %s, want %s"
                             % (tid, n, seen, (w["functions"], w["lines"], w["instruction_addr"], w["trust"])))
    modules = answer.get("modules") or []
    if len(modules) != len(expected["modules"]):
        diffs.append("%d modules, want %d" % (len(modules), len(expected["modules"])))
    for got, want in zip(modules, expected["modules"]):
        status = "found" if want["on_stack"] else "unused"
        for field in ("debug_status", "unwind_status"):
            if got.get(field) != status:
                diffs.append("module %s: %s %s, want %s" % (want["code_file"], field, got.get(field), status))
    return diffs


# ------------------------------------------------------------------------ main


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out_dir")
    p.add_argument("--seed", type=int, default=25)
    p.add_argument("--modules", type=int, default=160)
    p.add_argument("--threads", type=int, default=40)
    p.add_argument("--large", type=int, default=4, help="modules with large .sym files")
    p.add_argument("--large-mib", type=float, default=40, help="mean size of the large .sym files")
    p.add_argument("--small-kib", type=float, default=200, help="typical size of the other .sym files")
    p.add_argument("--min-frames", type=int, default=10)
    p.add_argument("--max-frames", type=int, default=30)
    p.add_argument("--check", metavar="ANSWER",
                   help="compare a /minidump answer with OUT_DIR/expected.json instead")
    args = p.parse_args()
    if args.check:
        diffs = check(args.out_dir, args.check)
        for line in diffs[:10]:
            print(line)
        print("differences from expected.json: %d" % len(diffs))
        return 1 if diffs else 0
    if args.modules < 3:
        p.error("--modules: at least 3 (the executable, libc and one library)")
    if args.threads < 1:
        p.error("--threads: at least 1")
    args.large = min(args.large, args.modules - 2)
    # Enough for the fixed top and bottom frames and one frame of application code.
    args.min_frames = max(args.min_frames, 7)
    args.max_frames = max(args.max_frames, args.min_frames)

    rng = random.Random(args.seed)
    symbols = os.path.join(args.out_dir, "symbols")
    os.makedirs(symbols, exist_ok=True)
    modules = make_modules(args, rng)
    for m in modules:
        m.sym_bytes = write_sym(m, symbols, random.Random(m.seed ^ 0x5EED))
    place(modules, rng)
    threads = make_threads(args, modules, rng)
    timestamp = 1_700_000_000 + rng.randrange(1 << 24)
    fault = write_dump(os.path.join(args.out_dir, "crash.dmp"), modules, threads, rng, timestamp)

    expected = {
        "seed": args.seed,
        "minidump": "crash.dmp",
        "symbols": "symbols",
        "timestamp": timestamp,
        "crash": {"signal": "SIGSEGV", "address": hex(fault),
                  # The servers' crash_reason: rust-minidump's reason, then the address.
                  "reason": "SIGSEGV / SEGV_MAPERR / %s" % hex(fault),
                  "thread_id": next(t["id"] for t in threads if t["crashed"])},
        "modules": [{
            "code_file": m.path, "code_id": m.code_id, "debug_id": m.debug_id,
            "breakpad_id": m.breakpad_id, "image_addr": hex(m.base), "image_size": m.image_size,
            "sym": m.sym, "sym_bytes": m.sym_bytes, "functions": len(m.starts),
            "large": m.large, "on_stack": m.on_stack,
        } for m in modules],
        "threads": [],
    }
    for t in threads:
        frames = []
        for fr in t["frames"]:
            # The walker reports a caller at its return address - 1, inside the call.
            addr = fr.pc if fr.context else fr.pc - 1
            functions, lines = symbolicated(fr.module, fr.fn, addr - fr.module.base)
            frames.append({"instruction_addr": hex(addr), "module": fr.module.index,
                           "trust": "context" if fr.context else "cfi",
                           "functions": functions, "lines": lines})
        expected["threads"].append({"thread_id": t["id"], "crashed": t["crashed"],
                                    "registers": {k: hex(v) for k, v in t["regs"].items()},
                                    "frames": frames})
    with open(os.path.join(args.out_dir, "expected.json"), "w") as out:
        json.dump(expected, out, indent=1)
        out.write("\n")

    sym_total = sum(m.sym_bytes for m in modules)
    frames = sum(len(t["frames"]) for t in threads)
    print("%s: %d modules (%d with frames), %d threads, %d frames, dump %.1f MiB, "
          ".sym files %.1f MiB (the large ones: %s)"
          % (args.out_dir, len(modules), sum(m.on_stack for m in modules), len(threads), frames,
             os.path.getsize(os.path.join(args.out_dir, "crash.dmp")) / 1048576, sym_total / 1048576,
             ", ".join("%.1f MiB" % (b / 1048576) for b in
                       sorted((m.sym_bytes for m in modules if m.large), reverse=True)) or "none"))


if __name__ == "__main__":
    sys.exit(main())
