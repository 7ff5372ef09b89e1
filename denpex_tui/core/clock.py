"""The one clock for the durations Denpex prints: wall time since the process the user started
began, read from the kernel (``/proc/self/stat``), so a figure covers the interpreter's start-up
and the imports too, not only the work after them. Read at import, in the parent: a forked worker
(``scan`` runs in one) reports from the same start."""

from __future__ import annotations

import os
import time

__all__ = ["since_start", "start_epoch"]


def _age_now() -> float | None:
    """Seconds since this process started, by the kernel's boot-time clock; None off Linux."""
    try:
        with open(f"/proc/{os.getpid()}/stat", "rb") as f:
            stat = f.read()
        fields = stat[stat.rindex(b")") + 2:].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: starttime, in ticks since boot
        return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - started)
    except (OSError, ValueError, IndexError, AttributeError):
        return None


_age = _age_now()
_START_EPOCH = time.time() - (_age or 0.0)
_START_MONO = time.monotonic() - (_age or 0.0)


def since_start() -> float:
    """Wall seconds since the process started (monotonic: a clock step does not change it)."""
    return time.monotonic() - _START_MONO


def start_epoch() -> float:
    """When the process started, as ``time.time()`` would have said then."""
    return _START_EPOCH
