"""The job's story across attempts (core/story.py), told the same by scan and watch: a real
torchrun run restarted once (--max-restarts 1) whose attempt 0 ran out of space on rank 2 and
whose attempt 1 then failed to rendezvous on rank 0."""

from __future__ import annotations

import asyncio
import io
import os

from rich.console import Console
from test_app_support import make_app, settle, until, widget_text

from denpex_tui.app.widgets.findings import FindingList
from denpex_tui.app.widgets.status import StatusBar
from denpex_tui.core.scan import scan_paths
from denpex_tui.core.story import job_story
from denpex_tui.render.report import print_scan

RESTART = os.path.join(os.path.dirname(__file__), "fixtures", "runs", "restart_enospc")


def test_root_cause_is_attempt_0s_and_the_restart_is_told_beneath():
    r = scan_paths([RESTART])
    st = job_story(r.incidents, r.job.failure_entries(), len(r.job.ranks_by_attempt()))
    assert st.root.attempt == 0 and st.root.initiating.rank == 2
    assert st.root.initiating.signature == "torch.save-write-failed"
    assert st.headline.startswith("rank 2 initiating: torch.save") and st.headline.endswith("confidence high")
    assert st.restarts == 1 and st.beneath.startswith("restarted once; attempt 1 failed: rank 0")
    assert st.beneath.endswith(st.latest.summary) and st.latest.attempt == 1
    assert [(a.attempt, a.is_root) for a in st.attempts] == [(0, True), (1, False)] and st.attempts[0].rank == 2
    # torchrun's own summary of attempt 0 names rank 0 (the first process it saw exit)
    assert st.launcher_note.startswith("torchrun's Root Cause names rank 0; Denpex says rank 2 because")
    # the order of the incidents does not change the story
    assert job_story(list(reversed(r.incidents)), r.job.failure_entries()).root is st.root


def test_a_single_attempt_has_no_restart_line():
    r = scan_paths([os.path.join(os.path.dirname(__file__), "fixtures", "corpus", "enospc_checkpoint_fastfail")])
    st = job_story(r.incidents, r.job.failure_entries(), len(r.job.ranks_by_attempt()))
    assert st.restarts == 0 and st.beneath is None and len(st.attempts) == 1


def test_scan_and_watch_tell_the_same_story():
    r = scan_paths([RESTART])
    buf = io.StringIO()
    print_scan(r, Console(file=buf, width=300, color_system=None), measure=False)
    report = buf.getvalue()
    st = job_story(r.incidents, r.job.failure_entries(), len(r.job.ranks_by_attempt()))
    assert f"Root cause: {st.headline}" in report and st.beneath in report and st.launcher_note in report

    async def main():
        app = make_app(RESTART)
        async with app.run_test(size=(120, 36)) as pilot:
            await settle(app, pilot)
            # the launcher's report and attempt 1 may be triaged a moment after the root cause
            assert await until(pilot, lambda: app.state.story is not None and app.state.story.restarts == 1
                               and app.state.story.launcher_note is not None
                               and app.query_one(StatusBar)._data[6] == tuple(app.state.story_lines()), timeout=20)
            _shape, _el, _f, level, diagnosis, _x, story = app.query_one(StatusBar)._data
            wst = app.state.story
            assert level == "initiating" and diagnosis == wst.headline
            # the same story: root cause rank and signature, restarts, the launcher's other rank
            # (the confidence may differ: the live engine's and scan's timestamps of the same
            # traceback differ, a core matter)
            assert (wst.root.attempt, wst.root.initiating.rank, wst.root.initiating.signature) == \
                (st.root.attempt, st.root.initiating.rank, st.root.initiating.signature)
            assert story == (wst.beneath, wst.launcher_note) and wst.beneath == st.beneath
            assert wst.launcher_note.startswith("torchrun's Root Cause names rank 0; Denpex says rank 2")
            # the header shows all of it at 120 columns: the confidence and the launcher's rank
            screen = "\n".join(widget_text(app.query_one(StatusBar)))
            assert f"confidence {wst.confidence}" in screen and "Root Cause names rank 0" in screen
            # the fix panel and 'i' go to the root cause (attempt 0), not attempt 1's error
            assert app.state.incident.attempt == 0 and app.state.incident.initiating.rank == 2
            groups = app.query_one(FindingList)._groups
            assert groups[0].attempt == 0 and groups[0].signature == "torch.save-write-failed"

    asyncio.run(main())
