"""Which training processes on this node are the job's, and how each was tied to it.

A process found by :func:`~denpex_tui.probes.processes.find_training_processes` is the job's only
when something ties it to the job: its cwd is under a job folder, it has one of the job's log
files open, its launcher's ``--log-dir`` is there, or its command line names the job's folder; a
launcher's workers are tied through it. Others are "other processes here". Only the invoking
user's processes are considered unless asked. No textual/rich import here (domain core).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Iterable

from .processes import PROC, TrainingProcess

__all__ = ["JobTie", "tie_to_job"]


_LOG_DIR_ARG = re.compile(r"^--log[_-]dir(?:=(.+))?$")
MAX_FDS_READ = 4096


@dataclass(frozen=True)
class JobTie:
    """A training process and how it was tied to the job (``how`` is None: not tied)."""

    process: TrainingProcess
    how: str | None


def _under(path: str, roots: list[str]) -> str | None:
    for r in roots:
        if path == r or path.startswith(r.rstrip("/") + "/"):
            return r
    return None


def _proc_uid(pid: int, proc: str) -> int | None:
    try:
        return os.stat(f"{proc}/{pid}").st_uid
    except OSError:
        return None


def _tie(p: TrainingProcess, roots: list[str], files: set[str], proc: str) -> str | None:
    """How ``p`` is tied to the job's folders ``roots`` / log ``files``, or None."""
    argv = p.cmdline
    for i, a in enumerate(argv):  # the launcher's --log-dir
        m = _LOG_DIR_ARG.match(a)
        if m:
            v = m.group(1) if m.group(1) is not None else (argv[i + 1] if i + 1 < len(argv) else "")
            if v:
                rv = os.path.realpath(os.path.join(_cwd(p.pid, proc) or "/", v))
                if _under(rv, roots) or any(_under(r, [rv]) for r in roots):
                    return f"--log-dir {v}"
    try:
        fds = os.listdir(f"{proc}/{p.pid}/fd")[:MAX_FDS_READ]
    except OSError:
        fds = []
    for fd in fds:  # an open log file of the job
        try:
            target = os.readlink(f"{proc}/{p.pid}/fd/{fd}")
        except OSError:
            continue
        if target in files or (target.endswith(".log") and _under(target, roots)):
            return f"has {target} open"
    cwd = _cwd(p.pid, proc)
    if cwd is not None and _under(cwd, roots):
        return f"runs in {cwd}"
    for a in argv[1:]:  # the job's command line names its folder
        if "/" in a:
            val = a.split("=", 1)[1] if a.startswith("-") and "=" in a else a
            rv = os.path.realpath(os.path.join(cwd or "/", val))
            if _under(rv, roots):
                return f"command line names {val}"
    return None


def _cwd(pid: int, proc: str) -> str | None:
    try:
        return os.readlink(f"{proc}/{pid}/cwd")
    except OSError:
        return None


def tie_to_job(procs: list[TrainingProcess], job_paths: list[str], *, log_files: Iterable[str] = (),
               all_users: bool = False, uid: int | None = None, proc: str = PROC) -> tuple[list[JobTie], list[JobTie]]:
    """Split ``procs`` into (the job's, other processes here). A process is the job's only when
    something ties it to the job: its cwd is under a job folder, it has one of the job's log
    files open, its launcher's ``--log-dir`` is there, or its command line names it; a worker of
    a tied launcher is tied through it. Only the invoking user's processes (``uid``, default
    this process's) are considered unless ``all_users``."""
    roots = []
    for jp in job_paths:
        rp = os.path.realpath(jp)
        roots.append(rp if os.path.isdir(rp) else os.path.dirname(rp))
    files = {os.path.realpath(f) for f in log_files}
    files |= {os.path.realpath(jp) for jp in job_paths if os.path.isfile(jp)}
    me = os.getuid() if uid is None else uid
    mine = [p for p in procs if all_users or _proc_uid(p.pid, proc) == me]
    how = {p.pid: _tie(p, roots, files, proc) for p in mine}
    for p in mine:  # a launcher's tie holds for its workers
        if how[p.pid] is None and p.launcher_pid is not None and how.get(p.launcher_pid):
            how[p.pid] = f"its launcher (pid {p.launcher_pid}) {how[p.launcher_pid]}"
    ours = [JobTie(p, how[p.pid]) for p in mine if how[p.pid]]
    others = [JobTie(p, None) for p in procs if not how.get(p.pid)]
    return ours, others
