"""Numbers for people (byte sizes and counts, shared by every view) and numbers from logs.

A number read from a log or a file name (a rank, a pid, a step, an errno) is only one when it
is in a sane range: :func:`log_int` never calls ``int()`` on 4 301 digits (Python refuses, and
a job of 10**4300 ranks is not a job), it answers None and the caller ignores the number.
"""

from __future__ import annotations

__all__ = ["human_bytes", "human_count", "log_int", "MAX_RANK", "MAX_ERRNO", "MAX_PID", "MAX_STEP"]

MAX_RANK = 10_000_000  # ranks, local ranks, attempts, rotation numbers
MAX_ERRNO = 4095  # Linux errnos are below 4096
MAX_PID = 1 << 22  # the kernel's PID_MAX_LIMIT
MAX_STEP = 10**15  # training steps, iterations, line numbers


def log_int(s: str | None, limit: int = MAX_RANK) -> int | None:
    """``s`` as an int when it is ASCII digits (a leading ``-`` allowed) and ``|n| <= limit``."""
    if not s:
        return None
    digits = s[1:] if s[0] == "-" else s
    if not digits or len(digits) > len(str(limit)) or not (digits.isascii() and digits.isdigit()):
        return None
    n = int(s)
    return n if -limit <= n <= limit else None


def human_bytes(n: int | float | None) -> str:
    """1536 -> '1.5 KiB'; None -> '?' (a reading we could not take is never shown as 0)."""
    if n is None:
        return "?"
    v = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(v) < 1024 or unit == "PiB":
            return f"{int(v)} {unit}" if unit == "B" else f"{v:.1f} {unit}"
        v /= 1024
    return f"{v:.1f} PiB"  # pragma: no cover


def human_count(n: int | None) -> str:
    """12345 -> '12.3 k', 3100000 -> '3.1 M'; None -> '?'."""
    if n is None:
        return "?"
    if n < 10_000:
        return str(n)
    if n < 1_000_000:
        return f"{n / 1000:.1f} k"
    return f"{n / 1e6:.1f} M"
