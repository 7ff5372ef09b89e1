"""``denpex probe --stacks``: the stacks of the job's processes, grouped by identical stack.

    denpex probe --stacks [--logs PATH...] [--pid PID...] [--json] [--all-users]

Processes: ``--pid``, else the training workers on this node tied to the job whose logs
``--logs`` names (cwd, an open log file, the launcher's ``--log-dir``, the command line:
:mod:`denpex_tui.probes.jobtie`), else every training worker of yours here (said). With
``--logs``, the job's Flight Recorder dumps (when there are any) give each group its collective.
"""

from __future__ import annotations

import json
import os
import sys

from denpex_tui.core.stacks import group_stacks
from denpex_tui.core.text import safe_json, safe_str

__all__ = ["run_stacks", "job_processes", "collective_places"]


def job_processes(logs: list[str], *, all_users: bool = False) -> tuple[list[tuple[int, int | None]], str]:
    """(pid, rank) of the job's training workers here, and how they were chosen."""
    from .jobtie import tie_to_job
    from .processes import find_training_processes

    procs = [p for p in find_training_processes() if p.role == "worker"]
    if logs:
        ours, others = tie_to_job(procs, logs, all_users=all_users)
        why = f"{len(ours)} processes tied to the job" + (f" ({len(others)} other training processes here)"
                                                          if others else "")
        return [(t.process.pid, t.process.rank) for t in ours], why
    mine = [p for p in procs if all_users or _uid(p.pid) == os.getuid()]
    return [(p.pid, p.rank) for p in mine], (f"{len(mine)} training processes of yours here (no --logs: not tied "
                                             "to one job)")


def _uid(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def collective_places(logs: list[str]) -> dict[int, str]:
    """rank -> "seq N (op)" from the job's Flight Recorder dumps, when it has any."""
    if not logs:
        return {}
    from denpex_tui.core.scan import scan_paths

    try:
        fr = scan_paths(logs, include_user=False, io_timeout=30).job.flight_recorder()
    except (OSError, ValueError):
        return {}
    if fr is None:
        return {}
    return {r: f"seq {g.last_seq} ({g.op})" for g in fr.groups if g.last_seq is not None for r in g.ranks}


def run_stacks(args, pids: list[int], err) -> int:
    from .stacks import pyspy_path, read_stacks

    logs = list(getattr(args, "logs", []) or [])
    if pids:
        from .processes import find_training_processes

        ranks = {p.pid: p.rank for p in find_training_processes()}
        procs, why = [(p, ranks.get(p)) for p in pids], f"{len(pids)} processes given with --pid"
    else:
        procs, why = job_processes(logs, all_users=bool(getattr(args, "all_users", False)))
    if not procs:
        return err("no training process of the job here" + (" (tied to " + ", ".join(logs) + ")" if logs else "")
                   + "; give --pid PID or --logs PATH")
    stacks = read_stacks(procs)
    groups = group_stacks(stacks, collective_places(logs))
    tool = "py-spy" if pyspy_path() else "/proc only (py-spy is not installed: pip install 'denpex[stacks]')"
    if getattr(args, "json", False):
        out = {"schema": 1, "processes": why, "tool": tool, "groups": [g.to_json() for g in groups]}
        sys.stdout.write(json.dumps(safe_json(out), ensure_ascii=False) + "\n")
        return 0
    from denpex_tui.render.safe import safe_console
    from rich.text import Text

    con = safe_console()
    con.print(Text(f"denpex probe --stacks: {safe_str(why)}; stacks from {tool}", style="bold"))
    for g in groups:
        con.print(Text("  " + g.headline(), style="bold red" if g.count < len(stacks) / 2 else "bold"))
        for f in g.frames[:8]:
            con.print(Text("      " + f.describe(), style="dim"))
        if not g.frames:
            con.print(Text(f"      state {g.state or '?'}, wchan {g.wchan or '?'}", style="dim"))
        for e in g.errors[:2]:
            con.print(Text("      " + e, style="yellow"))
    return 0
