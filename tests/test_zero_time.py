"""Go's zero time in a sidecar's log does not stop the diagnosis (issue 19, item 5).

A logrus sidecar prints ``time.Time{}`` as ``0001-01-01 00:00:00 +0000 UTC``; a C++ one
``[0001-01-01 00:00:00]``. Before, ``scan`` exited 2 with "year 0 is out of range" and no report,
``--follow`` died and ``watch`` said "engine stopped" without ever naming the real failure on the
next rank. Here the sidecar sits beside the corpus's real failing job (rank 2's torch.save hits
ENOSPC): every face of Denpex names rank 2, and the sidecar's lines have no time."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from denpex_tui.core.catalog import load_catalog
from denpex_tui.live.engine import Engine
from denpex_tui.live.events import HistoryDone

CASE = Path(__file__).parent / "fixtures" / "corpus" / "enospc_checkpoint_fastfail"
SIDECAR = (
    'time="0001-01-01 00:00:00 +0000 UTC" level=info msg="sidecar starting" version=1.4.2\n'
    "[0001-01-01 00:00:00] worker up\n"
    'time="0001-01-01 00:00:00 +0000 UTC" level=warning msg="lease not renewed" last=0001-01-01T00:00:00Z\n'
)


def _job(tmp_path: Path) -> Path:
    job = tmp_path / "job"
    shutil.copytree(CASE, job, ignore=shutil.ignore_patterns("truth.json"))
    (job / "sidecar.log").write_text(SIDECAR)
    return job


def _denpex(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "denpex_tui", *args], capture_output=True, text=True, timeout=timeout)


def test_scan_reports_the_real_failure_beside_go_zero_times(tmp_path):
    job = _job(tmp_path)
    r = _denpex("scan", "--json", str(job))
    assert r.returncode == 1, r.stderr  # found, not an input error
    inc = json.loads(r.stdout)["incidents"][0]
    assert inc["initiating"]["rank"] == 2 and "out of range" not in r.stderr
    r = _denpex("scan", str(job))
    assert r.returncode == 1 and "rank 2 initiating" in r.stdout and "Traceback" not in r.stderr


def test_follow_goes_on_and_names_rank_2(tmp_path):
    job = _job(tmp_path)
    p = subprocess.Popen([sys.executable, "-m", "denpex_tui", "scan", "--follow", "--json", str(job)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        end, named = time.monotonic() + 120, None
        while time.monotonic() < end and named is None:
            line = p.stdout.readline()
            if not line:
                break
            ev = json.loads(line)
            if ev.get("event") == "incident" and not ev.get("provisional") and ev.get("initiating"):
                named = ev["initiating"]["rank"]
        assert named == 2 and p.poll() is None  # still following
    finally:
        p.terminate()
        _, err = p.communicate(timeout=30)
    assert "out of range" not in err and "Traceback" not in err


def test_the_engine_reads_on_and_the_sidecar_lines_have_no_time(tmp_path):
    job = _job(tmp_path)

    async def run():
        eng = Engine([str(job)], load_catalog(include_user=False), processes=False, polite=False, index=True)
        agen = eng.run().__aiter__()
        try:
            end = time.monotonic() + 60
            while time.monotonic() < end:
                ev = await asyncio.wait_for(agen.__anext__(), timeout=60)
                if isinstance(ev, HistoryDone):
                    break
            await eng.call(eng.finish)
            return eng, ev
        finally:
            eng.stop()
            await agen.aclose()

    eng, done = asyncio.run(run())
    assert isinstance(done, HistoryDone)
    inc = next(i for i in eng.incidents if i.initiating is not None)
    assert inc.initiating.rank == 2 and not inc.provisional
    idx = next(ix for path, ix in done.indexes.items() if path.endswith("sidecar.log"))
    assert idx.lines == 3 and not idx.timed  # no time, never year 1
