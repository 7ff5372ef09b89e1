"""Shared helpers of the watch-TUI tests (imported by tests/test_app_*.py; no tests here).

Deterministic inputs for the app: the demo job written finished at a fixed start time, a
healthy job (the demo's lines before the failure), a frozen clock, fixed probe readings.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from datetime import datetime, timedelta
from pathlib import Path

from denpex_tui.app.app import DenpexApp
from denpex_tui.app.factory import WatchOptions
from denpex_tui.app.factory import make_app as _make_app
from denpex_tui.app.replay import collect
from denpex_tui.core.catalog import load_catalog
from denpex_tui.core.demo import demo_lines, write_demo_job
from denpex_tui.probes.readings import PathReading, ProcessReading, Snapshot
from denpex_tui.probes.trends import PathTrend, ProcessTrend

DEMO_START = datetime(2026, 11, 29, 18, 43, 0)
NOW = (DEMO_START + timedelta(seconds=150)).timestamp()
SNAP_ROOT = "/tmp/denpex-snapshot-demo"  # fixed: the fix panel shows the log's path


def clock() -> float:
    return NOW


def catalog():
    return load_catalog(include_user=False)


def write_failed_job(root: str | os.PathLike) -> str:
    shutil.rmtree(root, ignore_errors=True)
    write_demo_job(root, start=DEMO_START)
    return str(root)


def write_healthy_job(root: str | os.PathLike, steps: int = 60) -> str:
    """The demo's lines with no failure: torchrun's layout, console plus per-rank files."""
    root = Path(root)
    shutil.rmtree(root, ignore_errors=True)
    files: dict[Path, list[str]] = {}
    for ln in demo_lines(DEMO_START, steps=steps, fail_step=10**6):
        if ln.rank is not None:
            p = root / "logs" / "healthy-run_x1" / "attempt_0" / str(ln.rank) / f"{ln.stream}.log"
            files.setdefault(p, []).append(ln.text)
        files.setdefault(root / "console.log", []).append(ln.text if ln.rank is None else f"[default{ln.rank}]:{ln.text}")
    for p, lines in files.items():
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("\n".join(lines) + "\n")
    return str(root)


def replay(root: str):
    return asyncio.run(collect([root], catalog()))


def make_app(root: str, *, engine=None, theme: str | None = None, probes: bool = False, **kw) -> DenpexApp:
    opts = WatchOptions(paths=[root], processes=False, probes=probes, root=root, clock=clock, theme=theme, **kw)
    return _make_app(opts, catalog(), engine=engine)


async def settle(app: DenpexApp, pilot, *, incident: bool = True, timeout: float = 40.0, quiet: float = 1.2) -> None:
    """Wait until the engine's events are on screen and nothing changed for ``quiet`` seconds
    (and the fix panel is filled when there is an incident)."""
    from denpex_tui.app.widgets.fixpanel import FixPanel
    from denpex_tui.app.widgets.logview import LogView

    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    last, since = None, loop.time()
    while loop.time() < end:
        await pilot.pause(0.05)
        log = app.query_one(LogView)
        worker = app.timeline_worker
        sig = (app.state.version, log.row_count, app.query_one(FixPanel).finding, worker.handled)
        if sig != last:
            last, since = sig, loop.time()
        ready = worker.idle and log.row_count > 0 and app.state.summary.sources > 0 and (
            not log.follow or log.scroll_y >= log.max_scroll_y)
        if incident:
            ready = ready and app.state.incident is not None and app.query_one(FixPanel).finding is not None
        if ready and loop.time() - since >= quiet:
            return
    raise AssertionError("the app did not settle")


def fixed_readings(root: str, near_limits: bool = True):
    """(snapshot, path trends, process trends) as the probe worker would post them."""
    gib = 1 << 30
    total = 500 * gib
    free = int(total * (0.012 if near_limits else 0.4))
    data = PathReading(path=root, why=["--path"], exists=True, measured_path=root, mount="/scratch", fstype="lustre",
                       fs_class="parallel", network_fs=True, bytes_total=total, bytes_free=free, bytes_reserved=0,
                       bytes_used=total - free, inodes_total=10_000_000, inodes_free=int(10_000_000 * 0.15),
                       deleted_open_bytes=37 * gib if near_limits else 0)
    shm = PathReading(path="/dev/shm", why=["/dev/shm"], exists=True, measured_path="/dev/shm", mount="/dev/shm",
                      fstype="tmpfs", fs_class="memory", bytes_total=64 * gib, bytes_free=60 * gib,
                      inodes_total=16_000_000, inodes_free=15_900_000, is_shm=True)
    procs = []
    for r in range(4):
        fds = (1015 if r == 2 else 840) if near_limits else 120
        procs.append(ProcessReading(pid=41230 + r, rank=r, local_rank=r, role="worker", readable=True,
                                    status="sleeping", fds=fds, fd_soft_limit=1024, fd_hard_limit=4096,
                                    deleted_open_files=3 if r == 2 else 0,
                                    deleted_open_bytes=(37 * gib if r == 2 else 0) if near_limits else 0))
    snap = Snapshot(time=NOW, host="gpu-node-01", processes=procs, paths=[data, shm])
    ptr = {root: PathTrend(root, free, data.inodes_free, eta_full_seconds=14 * 60 if near_limits else None)}
    prt = {}
    if near_limits:
        prt[41232] = ProcessTrend(41232, 2, 2, 1015, 1024, saves_observed=6, save_interval_s=300.0, eta_saves=3)
    return snap, ptr, prt


async def until(pilot, cond, timeout: float = 10.0, step: float = 0.05) -> bool:
    """Wait (bounded) until ``cond()`` holds; returns whether it did."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        if loop.time() >= end:
            return False
        await pilot.pause(step)
    return True


def shown_lines(log) -> list:
    """The log lines (not explanation rows) the log view shows, top to bottom."""
    out = []
    for i in range(log.row_count):
        e = log.buf.entry(i)
        if isinstance(e, int):
            out.append(log.buf.line(e))
    return out


def widget_text(widget) -> list[str]:
    """The lines a widget shows now, as plain text (what the terminal gets, without styles)."""
    from textual.geometry import Region

    w, h = widget.size
    return ["".join(seg.text for seg in strip) for strip in widget.render_lines(Region(0, 0, w, h))]
