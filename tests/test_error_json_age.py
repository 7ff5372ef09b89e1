"""A torchrun error.json has no final newline. The history pass reads it whole, but told the
follower it had read none of it, so the follower read it again and, 5 s later, flushed it as a
partial line *arriving now*: the ranks table's 'last' column said 0s for every rank with an
error file (seen in tmux on stalled_rank_hang: ranks 0-2 '0s', rank 3 '2.5d'), and the stall
detector heard those ranks speak."""

from __future__ import annotations

import asyncio
import os
import shutil
import time

from test_app_support import make_app, settle, until

from denpex_tui.core.catalog import load_catalog
from denpex_tui.core.matcher import Matcher
from denpex_tui.live.backlog import Backlog

CASE = os.path.join(os.path.dirname(__file__), "fixtures", "corpus", "stalled_rank_hang")


def _error_jsons(root):
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f == "error.json")


def test_the_history_pass_says_it_read_an_error_json_to_its_end():
    bl = Backlog([CASE], Matcher(load_catalog(include_user=False)), index=False, polite=False, jobs=1)
    bl.run(lambda h: None)
    at = bl.start_at()
    files = _error_jsons(CASE)
    assert len(files) == 3
    for p in files:
        assert at[os.path.abspath(p)][1] == os.path.getsize(p), p


def test_an_old_error_json_does_not_make_its_rank_look_just_heard(tmp_path):
    root = str(tmp_path / "job")
    shutil.copytree(CASE, root)
    old = time.time() - 60  # a job that ended a minute ago
    for d, _, fs in os.walk(root):
        for f in fs:
            os.utime(os.path.join(d, f), (old, old))
    paths = {os.path.abspath(p) for p in _error_jsons(root)}

    async def go():
        app = make_app(root)  # frozen clock: 18:45:30, the logs end at 18:04:17
        async with app.run_test(size=(200, 60)) as pilot:
            await settle(app, pilot)
            fol = app.engine.tailer.followers

            def read_to_the_end():
                # every error file open and its bytes emitted (by the history pass, or, before
                # the fix, as a partial line flushed 5 s later)
                fs = [fol.get(p) for p in paths]
                return all(f is not None and f.cur is not None and not f.cur.pending
                           and f.cur.emit_off == os.path.getsize(f.path) for f in fs)

            assert await until(pilot, read_to_the_end, timeout=30)
            await settle(app, pilot, quiet=1.0)
            ages = app.state.ages(app.options.clock())
            assert all(ages[r] is not None and ages[r] > 60 for r in (0, 1, 2)), ages

    asyncio.run(go())
