#!/usr/bin/env python3
"""Peak memory of ``scan --follow`` and ``watch`` on one huge line (report only).

Writes a file holding a real log line, then one line of ``--gib`` GiB without a newline
until its end, runs ``denpex scan --follow FILE`` (stdout to /dev/null) and ``denpex watch
FILE`` (in a pseudo-terminal, its output drained), waits until the process has read the
whole file (``rchar`` in /proc/PID/io) and its CPU is idle, and prints its peak RSS
(``VmHWM``). Goal from the issue: under 200 MB for a 2 GiB line.

    python bench/long_line_rss.py              # 2 GiB, both commands
    python bench/long_line_rss.py --gib 0.5 --only follow
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

FIRST = b"[rank0]:[W1218 20:27:21.426 ProcessGroupNCCL.cpp:1168] Warning: WorkNCCL(SeqNum=1, OpType=BROADCAST)\n"


def _status(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _rchar(pid: int) -> int:
    with open(f"/proc/{pid}/io") as fh:
        for line in fh:
            if line.startswith("rchar:"):
                return int(line.split()[1])
    return 0


def _cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        f = fh.read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def _drain(fd: int, stop: threading.Event) -> None:
    while not stop.is_set():
        r, _, _ = select.select([fd], [], [], 0.2)
        if fd in r:
            try:
                os.read(fd, 1 << 16)
            except OSError:
                return


def _measure(cmd: list[str], size: int, tty: bool, timeout: float) -> tuple[int, float]:
    master = None
    if tty:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        proc = subprocess.Popen(cmd, stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
                                env=dict(os.environ, TERM="xterm-256color"))
        os.close(slave)
        stop = threading.Event()
        threading.Thread(target=_drain, args=(master, stop), daemon=True).start()
    else:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < timeout and _rchar(proc.pid) < size:
            time.sleep(0.2)
        # then until its CPU is idle (the last pieces parsed)
        last = _cpu(proc.pid)
        while time.monotonic() - t0 < timeout:
            time.sleep(1.0)
            now = _cpu(proc.pid)
            if now - last < 0.05:
                break
            last = now
        hwm = _status(proc.pid, "VmHWM")
        read = _rchar(proc.pid)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if master is not None:
            stop.set()
            os.close(master)
    return hwm, read / max(size, 1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", type=float, default=2.0)
    ap.add_argument("--only", choices=["follow", "watch"])
    ap.add_argument("--timeout", type=float, default=600.0)
    a = ap.parse_args()
    size = int(a.gib * (1 << 30))
    with tempfile.TemporaryDirectory(prefix="denpex-long-line-") as d:
        path = os.path.join(d, "rank0.log")
        block = b"x" * (64 << 20)
        with open(path, "wb") as fh:
            fh.write(FIRST)
            left = size
            while left > 0:
                fh.write(block[: min(left, len(block))])
                left -= len(block)
            fh.write(b"\n")
        total = os.path.getsize(path)
        py = [sys.executable, "-m", "denpex_tui"]
        runs = {"follow": (py + ["scan", "--follow", path], False),
                "watch": (py + ["watch", "--no-probes", path], True)}
        for name, (cmd, tty) in runs.items():
            if a.only and name != a.only:
                continue
            hwm, frac = _measure(cmd, total, tty, a.timeout)
            print(f"{' '.join(cmd[2:4]) if name == 'follow' else 'watch'}: one {a.gib:g} GiB line: "
                  f"peak RSS (VmHWM) {hwm / 1e6:.0f} MB, read {100 * frac:.0f} % of the file")
    return 0


if __name__ == "__main__":
    sys.exit(main())
