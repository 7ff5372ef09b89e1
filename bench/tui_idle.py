#!/usr/bin/env python3
"""How much CPU ``denpex watch`` takes while the job is quiet (report only, no assertion).

Writes N quiet per-rank log files (a few lines each), runs the real app on them in a
pseudo-terminal (the real Textual driver), waits for the start-up read to finish, then measures
the app process's CPU time (user + system, all threads, psutil) over a window and prints it as
a percentage of one core. Goal from the issue: under 2 % with 256 files.

    python bench/tui_idle.py                 # 256 files, 30 s, probes on
    python bench/tui_idle.py --no-probes --files 1024 --seconds 60
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time

import psutil


def _drain(fd: int, stop: threading.Event, counter: list[int]) -> None:
    while not stop.is_set():
        r, _, _ = select.select([fd], [], [], 0.2)
        if fd in r:
            try:
                counter[0] += len(os.read(fd, 65536))
            except OSError:
                return


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--warmup", type=float, default=8.0)
    ap.add_argument("--no-probes", action="store_true")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="denpex-tui-idle-") as d:
        for r in range(a.files):
            with open(os.path.join(d, f"rank{r}.log"), "w") as f:
                for s in range(1, 6):
                    f.write(f"2026-11-29 18:43:0{s},000 INFO [rank{r}/{a.files}] train: step {s * 10} | loss 2.1\n")
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        cmd = [sys.executable, "-m", "denpex_tui", "watch", d] + (["--no-probes"] if a.no_probes else [])
        proc = subprocess.Popen(cmd, stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
                                env=dict(os.environ, TERM="xterm-256color"))
        os.close(slave)
        stop, written = threading.Event(), [0]
        t = threading.Thread(target=_drain, args=(master, stop, written), daemon=True)
        t.start()
        try:
            time.sleep(a.warmup)
            p = psutil.Process(proc.pid)
            c0, w0, t0 = p.cpu_times(), written[0], time.monotonic()
            time.sleep(a.seconds)
            c1, w1, t1 = p.cpu_times(), written[0], time.monotonic()
            threads = p.num_threads()
            os.write(master, b"q")
            proc.wait(timeout=10)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            stop.set()
            os.close(master)
    cpu = (c1.user + c1.system) - (c0.user + c0.system)
    wall = t1 - t0
    print(f"denpex watch, {a.files} quiet files, probes {'off' if a.no_probes else 'on'}: "
          f"{100 * cpu / wall:.2f} % of one core over {wall:.0f} s "
          f"(user {c1.user - c0.user:.2f} s, system {c1.system - c0.system:.2f} s, {threads} threads, "
          f"{(w1 - w0) / wall:.0f} bytes/s to the terminal)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
