"""``watch`` and a rank log that is deleted and written again, or rotated (issue 19, item 9).

A real job's per-rank log folder (the corpus's enospc_checkpoint_fastfail), rank 2's stdout made
long with its own step lines. While ``watch`` follows it, the file is deleted and a new one with
the rank's real first lines takes its name (a restarted attempt), or the file is renamed away and
a new one created (rotation). The old history never turns into blank rows: rotated, it stays
readable; deleted, its rows leave the views and the unfiltered view says why. The new file's lines
are found by search, and Denpex lets go of the deleted file (it would hold its disk space, the
deleted-open pattern Denpex itself diagnoses)."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import time
from pathlib import Path

import pytest

from denpex_tui.app.factory import WatchOptions, make_app
from denpex_tui.app.search import SearchQuery, find_all
from denpex_tui.app.widgets.logview import LogView
from denpex_tui.core.catalog import load_catalog

CASE = Path(__file__).parent / "fixtures" / "corpus" / "enospc_checkpoint_fastfail"
STEP = re.compile(rb" train: step \d+/")
FIRST = "train: Starting on host vm pid 30544 local_rank 2"


def _job(dst: Path) -> Path:
    """The case's log folder; rank 2's stdout holds its step lines many times (about 16 MB)."""
    shutil.copytree(CASE / "logs", dst)
    out = next(dst.rglob("attempt_0/2")) / "stdout.log"
    raw = out.read_bytes()
    steps = b"".join(x for x in raw.splitlines(keepends=True) if STEP.search(x))
    head, tail = raw.split(steps[:40], 1) if steps[:40] in raw else (raw, b"")
    out.write_bytes(head + steps * (16_000_000 // len(steps)) + steps[:40] + tail)
    return out


def _held(path: Path) -> list[str]:
    """This process's open files that are ``path`` deleted."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            t = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if t == f"{path} (deleted)":
            out.append(t)
    return out


async def _until(pilot, cond, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, f"not within {timeout:g} s: {what}"
        await pilot.pause(0.05)


def _rank2_rows(app, gen_sid: int) -> list[int]:
    tl = app.timeline
    return [int(s) for s in tl.rows_of(gen_sid)]


@pytest.mark.parametrize("how", ["recreated", "rotated"])
def test_watch_follows_a_recreated_or_rotated_rank_log(tmp_path: Path, how: str) -> None:
    asyncio.run(_follow(tmp_path, how))


async def _follow(tmp_path: Path, how: str) -> None:
    root = tmp_path / "job"
    log = _job(root)
    first_lines = log.read_bytes().splitlines(keepends=True)[:3]
    app = make_app(WatchOptions(paths=[str(root)], processes=False, probes=False, root=str(root)),
                   load_catalog(include_user=False))
    async with app.run_test(size=(120, 36)) as pilot:
        tl = app.timeline
        await _until(pilot, lambda: tl.built and app.timeline_worker.idle, 120, "history merged")
        old_sid = tl.sid_of(str(log))
        old_lines = tl.sources[old_sid].index.lines
        assert old_lines > 50_000
        old_row = int(tl.rows_of(old_sid)[1])
        old_text = tl.text(old_row)[0].text
        assert "Initialized process group" in old_text
        await _until(pilot, lambda: app.query_one(LogView).row_count == tl.default.count(tl.rows), 30,
                     "the screen shows the merged history")
        view_before = app.query_one(LogView).row_count

        if how == "recreated":
            log.unlink()
        else:
            log.rename(log.with_name("stdout.log.1"))
        log.write_bytes(b"".join(first_lines))

        def new_gen() -> int | None:
            sid = tl.sid_of(str(log))
            return sid if sid != old_sid and tl.sources[sid].index.lines == 3 else None

        await _until(pilot, lambda: new_gen() is not None and app.timeline_worker.idle, 60,
                     "the new file's lines merged")
        sid = new_gen()
        tl.forget_text()
        # the new file's lines are there and found
        new_rows = _rank2_rows(app, sid)
        assert [tl.text(r)[0].text for r in new_rows] == [x.decode().rstrip("\n") for x in first_lines]
        m = find_all(tl, SearchQuery(FIRST))
        assert sorted(int(s) for s in m.seqs) == [new_rows[0]] if how == "recreated" else \
            sorted(int(s) for s in m.seqs) == sorted([int(tl.rows_of(old_sid)[0]), new_rows[0]])
        if how == "rotated":  # the old history is still the file's text
            assert tl.text(old_row)[0].text == old_text
            await _until(pilot, lambda: app.query_one(LogView).row_count == view_before + 3, 30,
                         "the default view shows both generations")
        else:
            # no blank rows: out of the default view, and the unfiltered view says why
            await _until(pilot, lambda: app.query_one(LogView).row_count == view_before - old_lines + 3, 30,
                         "the deleted file's rows leave the default view")
            said = tl.text(old_row)[0].text
            assert said == "[stdout.log was deleted: its earlier lines can no longer be read]"
            # the deleted file is let go (the engine's follower reads it LINGER_S more, then closes)
            await _until(pilot, lambda: not _held(log), 60, f"{log} (deleted) closed")


def test_a_rank_log_replaced_as_the_history_pass_ends(tmp_path: Path, monkeypatch) -> None:
    """The file is replaced between the history pass and the follower's start (a slow, loaded
    machine): the follower reads the new file whole, as history, and says ``added``. The
    timeline still shows it as the name's new generation, its lines found by search."""
    from denpex_tui.live import backlog

    root = tmp_path / "job"
    log = _job(root)
    first_lines = log.read_bytes().splitlines(keepends=True)[:3]
    real_start_at = backlog.Backlog.start_at

    def replaced_first(self):
        log.unlink()
        log.write_bytes(b"".join(first_lines))
        return real_start_at(self)

    monkeypatch.setattr(backlog.Backlog, "start_at", replaced_first)
    asyncio.run(_replaced(root, log, first_lines))


async def _replaced(root: Path, log: Path, first_lines: list[bytes]) -> None:
    app = make_app(WatchOptions(paths=[str(root)], processes=False, probes=False, root=str(root)),
                   load_catalog(include_user=False))
    async with app.run_test(size=(120, 36)) as pilot:
        tl = app.timeline

        def new_gen() -> int | None:
            sid = tl.sid_of(str(log))
            return sid if sid is not None and tl.sources[sid].index.lines == 3 else None

        await _until(pilot, lambda: tl.built and new_gen() is not None and app.timeline_worker.idle, 60,
                     "the new file's lines merged")
        new_rows = _rank2_rows(app, new_gen())
        assert [tl.text(r)[0].text for r in new_rows] == [x.decode().rstrip("\n") for x in first_lines]
        assert sorted(int(s) for s in find_all(tl, SearchQuery(FIRST)).seqs) == [new_rows[0]]
