"""The real app in a pseudo-terminal: a log line carrying terminal escape sequences (OSC 52
clipboard write, OSC 0 title, CSI 2J clear screen, 8-bit C1 controls) must reach the terminal
only as harmless visible text. We read every byte the app writes."""

from __future__ import annotations

import fcntl
import os
import pty
import signal
import struct
import subprocess
import sys
import termios
import time
from helpers import readable

PAYLOAD = "cm0gLXJmIH4vKg=="  # base64 of a command an attacker would like in your clipboard
HOSTILE = (
    "2026-11-29 18:43:01,000 INFO [rank0/1] train: step 1\n"
    f"osc52 \x1b]52;c;{PAYLOAD}\x07 end\n"
    "title \x1b]0;PWNED-TITLE\x07 end\n"
    "clear \x1b[2J end\n"
    "c1 \u009b31m \u009d0;X\u009c end\n"
)


def _read(fd: int, until: float, want: bytes | None = None) -> bytes:
    out = b""
    while time.monotonic() < until:
        r = [fd] if readable(fd, 0.1) else []
        if fd in r:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
            if want is not None and want in out:
                # keep reading a little: the rest of the frame
                want = None
                until = min(until, time.monotonic() + 1.0)
    return out


def test_escape_sequences_in_a_log_line_reach_the_terminal_only_as_text(tmp_path):
    log = tmp_path / "rank0.log"
    log.write_bytes(HOSTILE.encode("utf-8"))
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 160, 0, 0))
    env = dict(os.environ, TERM="xterm-256color", COLUMNS="160", LINES="30")
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "denpex_tui", "watch", "--no-probes", str(tmp_path)],
        stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True, start_new_session=True,
    )
    os.close(slave)
    try:
        out = _read(master, time.monotonic() + 20, want=b"c1 ")
        os.write(master, b"q")
        out += _read(master, time.monotonic() + 5)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        os.close(master)
    assert b"step 1" in out, "the hostile line was not shown at all"
    # shown, as escaped text
    assert b"\\x1b]52;c;" + PAYLOAD.encode() in out
    assert b"\\x1b]0;PWNED-TITLE" in out
    assert b"\\x1b[2J" in out and b"\\x9b31m" in out
    # never as the sequences themselves
    assert b"\x1b]52" not in out  # the app copied nothing, so no OSC 52 at all
    assert b"\x1b]0;" not in out and b"\x1b]2;" not in out
    assert b"\x1b[2J" not in out
    for c1 in (b"\xc2\x9b", b"\xc2\x9d", b"\xc2\x9c", b"\xc2\x90"):
        assert c1 not in out
    assert proc.returncode == 0
