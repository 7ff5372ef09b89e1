"""``s`` in watch: the stacks of the job's processes, grouped by identical stack, in a screen.

The processes are those ``--pid`` names, else the training workers tied to the watched folders
(as the gauges tie them), else every training worker of yours here. Stacks are read in a worker
thread (py-spy stops each process for a few milliseconds; /proc where py-spy is missing or
refused); each group carries the collective the dumps put its ranks in, when there are dumps.
"""

from __future__ import annotations

__all__ = ["start", "collective_places"]


def collective_places(incident) -> dict[int, str]:
    table = getattr(incident, "collectives", None) or {}
    return {r: f"seq {g['last_seq']} ({g['op']})" for g in table.get("groups", []) if g.get("last_seq") is not None
            for r in g["ranks"]}


def start(app) -> None:
    pids = list(app.options.pids or [])
    paths = list(app.options.paths)
    places = collective_places(app.state.incident)
    app.notify("reading the stacks of the job's processes ...", timeout=3)

    def work() -> None:
        from denpex_tui.core.stacks import group_stacks
        from denpex_tui.probes.stacks import pyspy_path, read_stacks
        from denpex_tui.probes.stacks import job_processes

        try:
            if pids:
                from denpex_tui.probes.processes import find_training_processes

                ranks = {p.pid: p.rank for p in find_training_processes()}
                procs, why = [(p, ranks.get(p)) for p in pids], f"{len(pids)} processes given with --pid"
            else:
                procs, why = job_processes(paths, all_users=app.options.all_users)
            groups = group_stacks(read_stacks(procs), places) if procs else []
            tool = "py-spy" if pyspy_path() else "/proc only (py-spy is not installed: pip install 'denpex[stacks]')"
        except Exception as exc:  # a worker error must be visible, never lost
            if app.is_running:
                app.call_from_thread(app.notify, f"stacks not read: {type(exc).__name__}: {exc}", severity="error")
            return
        if not app.is_running:
            return
        if not procs:
            app.call_from_thread(app.notify, "no training process of the job on this node to read stacks of",
                                 severity="warning", timeout=8)
            return
        from denpex_tui.app.screens.stacks import StacksScreen

        app.call_from_thread(app.push_screen, StacksScreen(groups, f"{why}; stacks from {tool}"))

    app.run_worker(work, thread=True, group="stacks", exclusive=True, exit_on_error=False)
