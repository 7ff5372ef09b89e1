"""A relative path in a rank's logs is resolved against that rank's process's working directory
when a probe reads it (issue 20, "Paths": the launcher's cwd, --log-dir's parent, a process's cwd).

Rank 3's stderr of the corpus's fd-leak run alone has ``./checkpoints/rank3/...`` and no torchrun
layout, so the logs do not say where the job ran; the process table does.
"""

from __future__ import annotations

import asyncio
import glob
import os
import shutil
import subprocess
import sys
import time

from helpers import CORPUS
from test_app_support import make_app, settle, until

from denpex_tui.app.messages import ProbeUpdate
from denpex_tui.app.widgets.fixpanel import FixPanel
from denpex_tui.probes.readings import ProcessReading, Snapshot
from denpex_tui.probes.sampler import Prober
from denpex_tui.probes.wire import snapshot_from_json


def _job(tmp_path) -> str:
    src = glob.glob(str(CORPUS / "fd_leak_emfile" / "logs" / "*" / "attempt_0" / "3" / "stderr.log"))[0]
    root = tmp_path / "job"
    root.mkdir()
    shutil.copy(src, root / "rank3.err")
    return str(root)


def _commands(app) -> str:
    return "\n".join(r.command.text for r in app.query_one(FixPanel).commands if r.command is not None)


def test_watch_resolves_a_relative_path_against_the_ranks_process_cwd(tmp_path):
    root = _job(tmp_path)
    run_dir = str(tmp_path / "where it ran")

    async def main():
        app = make_app(root)
        async with app.run_test(size=(160, 45)) as pilot:
            await settle(app, pilot)
            inc = app.state.incident
            assert inc.initiating.rank == 3
            panel = app.query_one(FixPanel)
            assert "checkpoints" in _commands(app) and run_dir not in _commands(app)
            assert "not in them" in (panel.data.values.get("relative") or "")
            proc = ProcessReading(pid=4242, rank=3, local_rank=3, readable=True, status="sleeping", fds=1019,
                                  fd_soft_limit=1024, cwd=run_dir)
            app.post_message(ProbeUpdate(Snapshot(time=time.time(), host="gpu-node-01", processes=[proc], paths=[]),
                                         {}, {}))
            assert await until(pilot, lambda: run_dir in _commands(app), 20), _commands(app)
            note = app.query_one(FixPanel).data.values.get("relative") or ""
            assert f"resolved against {run_dir} (process 4242's working directory)" in note

    asyncio.run(main())


def test_the_sampler_reads_a_process_cwd_and_the_wire_carries_it(tmp_path):
    import psutil

    from denpex_tui.probes.processes import TrainingProcess

    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], cwd=tmp_path)
    try:
        tp = TrainingProcess(pid=p.pid, ppid=os.getpid(), rank=0, local_rank=0, world_size=1,
                             cmdline=["python", "train.py"], create_time=psutil.Process(p.pid).create_time(),
                             role="worker")
        s = Prober(finder=lambda: [tp], include_launchers=True)
        snap = s.snapshot()
        got = [r for r in snap.processes if r.pid == p.pid]
        assert got and got[0].cwd == os.path.realpath(tmp_path)
        back = snapshot_from_json(snap.to_json())
        assert [r.cwd for r in back.processes if r.pid == p.pid] == [os.path.realpath(tmp_path)]
    finally:
        p.kill()
        p.wait()
