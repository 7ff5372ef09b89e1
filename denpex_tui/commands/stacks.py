"""``denpex probe --stacks``: the stacks of the job's processes, grouped by identical stack.

    denpex probe --stacks [--logs PATH...] [--pid PID...] [--json] [--all-users]

Processes: ``--pid``, else the training workers on this node tied to the job whose logs
``--logs`` names (cwd, an open log file, the launcher's ``--log-dir``, the command line:
:mod:`denpex_tui.probes.jobtie`), else every training worker of yours here (said). With
``--logs``, the job's Flight Recorder dumps (when there are any) give each group its collective.
"""

from __future__ import annotations

import json
import sys

from denpex_tui.core.stacks import group_stacks
from denpex_tui.probes.stacks import collective_places, job_processes
from denpex_tui.core.text import safe_json, safe_str

__all__ = ["run_stacks"]


def run_stacks(args, pids: list[int], err) -> int:
    from denpex_tui.probes.stacks import pyspy_path, read_stacks

    logs = list(getattr(args, "logs", []) or [])
    if pids:
        from denpex_tui.probes.processes import find_training_processes

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
