"""A history pool worker that dies (the OOM killer, kill -9) takes the reads it had with it:
scan used to end on "internal error: BrokenProcessPool". Those reads, and every one not done
yet, are done again in the scan's own process, the report says so, and it is the report of an
undisturbed scan."""

from __future__ import annotations

import os

from helpers import CORPUS

from denpex_tui.core import history, historypool
from denpex_tui.core.scan import scan_paths


_REAL = historypool._worker_run
_PARENT: list[int] = []


def _dies_on_rank_2(task, *a, **kw):  # in a forked worker, this task kills it
    if os.getpid() not in _PARENT and "/2/" in task.info.path:
        os._exit(137)
    return _REAL(task, *a, **kw)


def _report(r) -> dict:
    j = r.to_json()
    return {k: j[k] for k in ("findings", "incidents", "ranks")}


def test_a_killed_pool_worker_s_reads_are_done_again_here(monkeypatch):
    case = str(CORPUS / "enospc_checkpoint_fastfail")
    monkeypatch.setattr(history, "PARALLEL_MIN_BYTES", 0)
    want = scan_paths([case], jobs=2)
    _PARENT[:] = [os.getpid()]
    monkeypatch.setattr(historypool, "_worker_run", _dies_on_rank_2)
    got = scan_paths([case], jobs=2)
    assert _report(got) == _report(want)
    notes = [w for w in got.warnings if "reader process ended abruptly" in w]
    assert len(notes) == 1 and notes[0] not in want.warnings, got.warnings
    assert got.readable_sources == want.readable_sources
