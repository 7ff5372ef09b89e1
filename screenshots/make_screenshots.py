#!/usr/bin/env python3
"""Generate the README's screenshots from the real app on the demo data. Never draw them by hand.

    python screenshots/make_screenshots.py          # writes screenshots/*.svg

The demo job is written finished (``write_demo_job``) at a fixed time; a healthy job is the
demo's lines before the failure. The live engine reads them and its events are replayed to the
app in a fixed order (``denpex_tui.app.replay``), with a frozen clock and fixed probe readings
(a nearly full checkpoint filesystem, one rank close to its fd limit) for the gauges.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
from datetime import datetime, timedelta
from pathlib import Path

from denpex_tui.app.app import DenpexApp, WatchOptions
from denpex_tui.app.messages import Measured, ProbeUpdate
from denpex_tui.app.replay import collect
from denpex_tui.app.widgets.fixpanel import FixPanel
from denpex_tui.app.widgets.logview import LogView
from denpex_tui.core.catalog import load_catalog
from denpex_tui.demo import demo_lines, write_demo_job
from denpex_tui.probes.differential import differential, differential_kind, metrics_for
from denpex_tui.probes.readings import PathReading, ProcessReading, Snapshot
from denpex_tui.probes.trends import PathTrend, ProcessTrend

OUT = Path(__file__).resolve().parent
WORK = Path("/tmp/denpex-screenshots")
START = datetime(2026, 11, 29, 17, 40, 0)
NOW = (START + timedelta(seconds=95)).timestamp()
GIB = 1 << 30


def write_healthy(root: Path) -> None:
    files: dict[Path, list[str]] = {}
    for ln in demo_lines(START, steps=80, fail_step=10**6):
        if ln.rank is not None:
            p = root / "logs" / "run01_k2x9" / "attempt_0" / str(ln.rank) / f"{ln.stream}.log"
            files.setdefault(p, []).append(ln.text)
        files.setdefault(root / "console.log", []).append(ln.text if ln.rank is None else f"[default{ln.rank}]:{ln.text}")
    for p, lines in files.items():
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("\n".join(lines) + "\n")


def readings(root: str, near: bool = True):
    total, free = 2000 * GIB, (21 if near else 1210) * GIB
    ckpt = PathReading(path=root, why=["--path"], exists=True, measured_path=root, mount="/scratch", fstype="lustre",
                       fs_class="parallel", network_fs=True, bytes_total=total, bytes_free=free, bytes_reserved=0,
                       bytes_used=total - free, inodes_total=50_000_000, inodes_free=9_000_000,
                       deleted_open_bytes=96 * GIB)
    shm = PathReading(path="/dev/shm", why=["/dev/shm"], exists=True, measured_path="/dev/shm", mount="/dev/shm",
                      fstype="tmpfs", fs_class="memory", bytes_total=256 * GIB, bytes_free=231 * GIB,
                      inodes_total=60_000_000, inodes_free=59_000_000, is_shm=True)
    procs = [ProcessReading(pid=41230 + r, rank=r, local_rank=r, role="worker", readable=True, status="sleeping",
                            fds=(1003 if r == 5 and near else 612 + 9 * r), fd_soft_limit=1024, fd_hard_limit=4096,
                            deleted_open_files=4 if r == 5 and near else 0,
                            deleted_open_bytes=96 * GIB if r == 5 and near else 0)
             for r in range(8)]
    snap = Snapshot(time=NOW, host="gpu-node-01", processes=procs, paths=[ckpt, shm])
    if not near:
        return snap, {}, {}
    return (snap, {root: PathTrend(root, free, ckpt.inodes_free, eta_full_seconds=11 * 60)},
            {41235: ProcessTrend(41235, 5, 5, 1003, 1024, saves_observed=7, save_interval_s=240.0, eta_saves=2)})


async def shoot(name, root, engine, size, *, theme=None, probes=False, near=True, steps=()):
    opts = WatchOptions(paths=[str(root)], processes=False, probes=False, root=str(root), clock=lambda: NOW,
                        theme=theme)
    app = DenpexApp(opts, load_catalog(include_user=False), engine=engine)
    async with app.run_test(size=size) as pilot:
        for _ in range(200):
            await pilot.pause(0.05)
            if app.query_one(LogView).row_count and (app.state.incident is None or app.query_one(FixPanel).finding):
                if app.state.summary.sources:
                    break
        await pilot.pause(0.5)
        if probes:
            snap, ptr, prt = readings(str(root), near)
            app.post_message(ProbeUpdate(snap, ptr, prt))
            f = app.query_one(FixPanel).finding
            if f is not None and differential_kind(f.signature):  # what the probe thread would measure
                app.post_message(Measured(app._fix_key, metrics_for(None, snap, du=False),
                                          differential(f.signature, None, snap, None, du=False)))
                await pilot.pause(0.3)
        for step in steps:
            await pilot.press(step)
            await pilot.pause(0.1)
        for _ in range(40):
            await pilot.pause(0.05)
            if "x" not in steps or app.query_one(LogView).buf.notes:
                break
        await pilot.pause(0.3)
        app.save_screenshot(filename=f"{name}.svg", path=str(OUT))
        print(f"screenshots/{name}.svg")


async def main() -> int:
    shutil.rmtree(WORK, ignore_errors=True)
    failed, healthy = WORK / "run01", WORK / "run02"
    write_demo_job(failed, start=START)
    write_healthy(healthy)
    catalog = load_catalog(include_user=False)
    fe = await collect([str(failed)], catalog)
    he = await collect([str(healthy)], catalog)
    await shoot("healthy", healthy, he, (160, 45), probes=True, near=False)
    await shoot("initiating-fix-panel", failed, fe, (200, 55), probes=True)
    await shoot("explained-traceback", failed, fe, (160, 45), steps=("i", "down", "down", "down", "x"))
    await shoot("gauges-near-limits", failed, fe, (130, 50), probes=True, steps=("5",))
    await shoot("tmux-80x24", failed, fe, (80, 24), steps=("i",))
    for theme in ("denpex-dark", "denpex-light", "denpex-high-contrast"):
        await shoot(f"theme-{theme}", failed, fe, (160, 45), theme=theme, probes=True)
    shutil.rmtree(WORK, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
