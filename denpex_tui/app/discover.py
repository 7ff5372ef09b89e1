"""``denpex watch`` with no PATH: find the logs of the training processes on this node.

For each training process (``probes.processes.find_training_processes``): the regular files its
stdout and stderr go to (``/proc/PID/fd/1``, ``fd/2``), and a torchrun ``--log-dir``/``--log_dir``
argument (relative to the process's working directory). Read-only; a process we may not
inspect is skipped and counted.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field

from denpex_tui.core.text import safe_str

__all__ = ["Discovery", "discover_logs"]


@dataclass
class Discovery:
    paths: list[str] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)
    unreadable: int = 0

    def message(self) -> str:
        if not self.pids:
            return "no training process (torchrun, deepspeed, python with RANK/LOCAL_RANK) found on this node"
        if not self.paths:
            return (f"found {len(self.pids)} training process(es) (pid {', '.join(map(str, self.pids[:6]))}"
                    f"{', ...' if len(self.pids) > 6 else ''}) but no log file: their output goes to a "
                    "terminal or a pipe" + (f"; {self.unreadable} could not be inspected" if self.unreadable else ""))
        return (f"following {len(self.paths)} log path(s) of {len(self.pids)} training process(es): "
                + ", ".join(safe_str(p) for p in self.paths[:3]) + (" ..." if len(self.paths) > 3 else ""))


def _log_dir_arg(cmdline: list[str]) -> str | None:
    for i, a in enumerate(cmdline):
        for opt in ("--log-dir", "--log_dir"):
            if a == opt and i + 1 < len(cmdline):
                return cmdline[i + 1]
            if a.startswith(opt + "="):
                return a.split("=", 1)[1]
    return None


def discover_logs(proc: str = "/proc") -> Discovery:
    from denpex_tui.probes.processes import find_training_processes

    d = Discovery()
    seen: set[str] = set()

    def add(p: str) -> None:
        p = os.path.realpath(p)
        if p not in seen:
            seen.add(p)
            d.paths.append(p)

    for tp in find_training_processes(proc=proc):
        d.pids.append(tp.pid)
        ok = False
        for fd in (1, 2):
            try:
                target = os.readlink(f"{proc}/{tp.pid}/fd/{fd}")
                st = os.stat(f"{proc}/{tp.pid}/fd/{fd}")
            except OSError:
                continue
            ok = True
            if stat.S_ISREG(st.st_mode) and target.startswith("/") and not target.endswith(" (deleted)"):
                add(target)
        log_dir = _log_dir_arg(tp.cmdline)
        if log_dir:
            if not os.path.isabs(log_dir):
                try:
                    log_dir = os.path.join(os.readlink(f"{proc}/{tp.pid}/cwd"), log_dir)
                except OSError:
                    log_dir = None
            if log_dir and os.path.isdir(log_dir):
                add(log_dir)
                ok = True
        if not ok:
            d.unreadable += 1
    return d
