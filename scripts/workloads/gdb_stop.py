# Run inside gdb (`gdb -batch -nx -x gdb_stop.py --args PROGRAM`) by generate.py: runs
# the program with ASLR off (gdb's default) until it stops on a signal, then writes
# $WL_STOP_OUT (JSON): the signal, every thread's physical frames, innermost first,
# with the address gdb has for each (the faulting pc for the crashing thread's first
# frame, return addresses for the callers), the number of frames gdb shows for each
# (inlinees included) and its function name, and the process's file-backed mappings.
import json
import os

import gdb

gdb.execute("set pagination off")
gdb.execute("set confirm off")
gdb.execute("set disable-randomization on")
# A crash report has the frames below main too.
gdb.execute("set backtrace past-main on")
gdb.execute("run", to_string=True)

inferior = gdb.selected_inferior()
signal = None
try:
    signal = gdb.parse_and_eval("$_siginfo.si_signo")
    signal = int(signal)
except gdb.error:
    pass
crashing = gdb.selected_thread().num

threads = []
for thread in sorted(inferior.threads(), key=lambda t: t.num):
    thread.switch()
    frames = []
    frame = gdb.newest_frame()
    pending = []  # inline frames, newest first, until their physical frame
    while frame is not None:
        name = frame.name()
        if frame.type() == gdb.INLINE_FRAME:
            pending.append(name)
        else:
            frames.append({
                "pc": frame.pc(),
                "function": name,
                "inlined": pending,
            })
            pending = []
        try:
            frame = frame.older()
        except gdb.error:
            break
    threads.append({"num": thread.num, "crashed": thread.num == crashing, "frames": frames})

mappings = []
with open(f"/proc/{inferior.pid}/maps") as maps:
    for line in maps:
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5].strip().startswith("/"):
            start, end = (int(x, 16) for x in parts[0].split("-"))
            mappings.append({"start": start, "end": end, "offset": int(parts[2], 16),
                             "path": parts[5].strip()})

with open(os.environ["WL_STOP_OUT"], "w") as out:
    json.dump({"signal": signal, "threads": threads, "mappings": mappings}, out, indent=1)
gdb.execute("kill")
