"""Snapshot tests of the watch TUI's main screens (pytest-textual-snapshot; plain ``def``).

Deterministic by construction: the demo job written finished at a fixed time into a fixed
folder, replayed to the app as a fixed sequence of the live engine's events
(``denpex_tui.app.replay``), a frozen clock, fixed probe readings, fixed terminal sizes.
Update with ``pytest tests/test_app_snapshots.py --snapshot-update`` and look at the report.
"""

from __future__ import annotations

import shutil

import pytest
from test_app_support import SNAP_ROOT, fixed_readings, make_app, replay, settle, write_failed_job, write_healthy_job

from denpex_tui.app.messages import ProbeUpdate
from denpex_tui.app.widgets.logview import LogView


@pytest.fixture(scope="module")
def failed():
    root = write_failed_job(f"{SNAP_ROOT}/run01")
    yield root, replay(root)


@pytest.fixture(scope="module")
def healthy():
    root = write_healthy_job(f"{SNAP_ROOT}/run02")
    yield root, replay(root)
    shutil.rmtree(SNAP_ROOT, ignore_errors=True)


def _app(job, **kw):
    root, engine = job
    return root, make_app(root, engine=engine, **kw)


def test_healthy(snap_compare, healthy):
    """A healthy job: every rank ok with its last line age; 'healthy' in the header."""
    root, app = _app(healthy)

    async def run_before(pilot):
        await settle(app, pilot, incident=False, quiet=0.4)

    assert snap_compare(app, terminal_size=(120, 36), run_before=run_before)


def test_initiating_rank_with_fix_panel(snap_compare, failed):
    """Rank 5 failed first: the header says so, rank 5 is FAILED FIRST, the other ranks are
    collateral (one folded findings row), the fix panel shows cause, checklist and commands."""
    root, app = _app(failed)

    async def run_before(pilot):
        await settle(app, pilot, quiet=0.4)

    assert snap_compare(app, terminal_size=(160, 45), run_before=run_before)


def test_initiating_jumped_to_in_a_tmux_pane(snap_compare, failed):
    """80x24: one pane at a time; 'i' jumped to the initiating traceback, highlighted."""
    root, app = _app(failed)

    async def run_before(pilot):
        await settle(app, pilot, quiet=0.4)
        await pilot.press("i")
        await pilot.pause(0.1)

    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)


def test_explained_traceback(snap_compare, failed):
    """The explanation opens under rank 5's traceback: signature, raising frame, cause, fix."""
    root, app = _app(failed)

    async def run_before(pilot):
        await settle(app, pilot, quiet=0.4)
        await pilot.press("i", "down", "down", "down", "x")
        for _ in range(40):
            await pilot.pause(0.05)
            if app.query_one(LogView).buf.notes:
                break
        await pilot.pause(0.2)

    assert snap_compare(app, terminal_size=(160, 45), run_before=run_before)


def test_gauges_near_their_limits(snap_compare, healthy):
    """Fixed probe readings: the checkpoint filesystem 98.8 % full with an ETA, one rank at
    1015/1024 fds with 37 GiB held by deleted-open files: symbols and words, not only colour."""
    root, app = _app(healthy)

    async def run_before(pilot):
        await settle(app, pilot, incident=False, quiet=0.4)
        app.post_message(ProbeUpdate(*fixed_readings(root, near_limits=True)))
        await pilot.pause(0.2)

    assert snap_compare(app, terminal_size=(120, 45), run_before=run_before)


@pytest.mark.parametrize("theme", ["denpex-light", "denpex-high-contrast"])
def test_themes(snap_compare, failed, theme):
    """The initiating screen in the light and the high-contrast (colour-blind safe) themes."""
    root, app = _app(failed, theme=theme)

    async def run_before(pilot):
        await settle(app, pilot, quiet=0.4)

    assert snap_compare(app, terminal_size=(160, 45), run_before=run_before)


def test_help_screen(snap_compare, failed):
    """Every key, the mouse, and the tmux 'set -g set-clipboard on' note for OSC 52 copy."""
    root, app = _app(failed)

    async def run_before(pilot):
        await settle(app, pilot, quiet=0.4)
        await pilot.press("question_mark")
        await pilot.pause(0.2)

    assert snap_compare(app, terminal_size=(110, 50), run_before=run_before)
