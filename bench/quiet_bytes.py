#!/usr/bin/env python3
"""Bytes ``denpex watch`` writes to its terminal while nothing happens.

    python bench/quiet_bytes.py DIR [--seconds 60] [--settle 10] [--size 120x36]

Runs ``denpex watch DIR`` in a pseudo-terminal of the given size, lets it draw its first frames
(``--settle`` seconds: history read, diagnosis, fix panel), then counts the bytes it writes over
``--seconds`` more, and prints them per second and per one-second bucket.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import select
import struct
import sys
import termios
import time


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--settle", type=float, default=10.0)
    ap.add_argument("--size", default="120x36")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cols, rows = (int(x) for x in a.size.split("x"))
    pid, fd = pty.fork()
    if pid == 0:
        os.environ["TERM"] = "xterm-256color"
        os.execvp(sys.executable, [sys.executable, *(["/tmp/wrap.py"] if os.environ.get("WRAP") else ["-m", "denpex_tui"]), "watch", a.path, *a.args])
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    t0 = time.monotonic()
    settle_end = t0 + a.settle
    end = settle_end + a.seconds
    first = 0
    buckets = [0] * int(a.seconds + 1)
    try:
        while True:
            now = time.monotonic()
            if now >= end:
                break
            r, _, _ = select.select([fd], [], [], min(0.2, end - now))
            if not r:
                continue
            try:
                data = os.read(fd, 65536)
            except OSError:
                break
            if not data:
                break
            now = time.monotonic()
            if now < settle_end:
                first += len(data)
            else:
                buckets[min(len(buckets) - 1, int(now - settle_end))] += len(data)
    finally:
        os.kill(pid, 15)
        os.waitpid(pid, 0)
    total = sum(buckets)
    print(f"first {a.settle:.0f} s: {first} bytes; then {total} bytes in {a.seconds:.0f} s = "
          f"{total / a.seconds:.1f} B/s; per second: {buckets[:int(a.seconds)]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
