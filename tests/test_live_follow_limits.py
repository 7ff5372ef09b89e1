"""Follow's noise and limits (issue 19, item 11): a refused source is said once per change, and
the cap on followed files counts only live files, prefers the newest attempt and names every
file it leaves out (with an option that exists). Real files, links, FIFOs, the real Tailer."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest

from test_live_tailer import data_of, events, run_tailer, until

LINE = b"[rank0]: step 1 | loss 2.0421\n"


@pytest.mark.parametrize("what", ["proc-link", "fifo"])
@pytest.mark.parametrize("inotify", [True, False])
def test_a_refused_source_is_said_once_per_change_not_once_a_second(tmp_path, what, inotify):
    p = tmp_path / "rank0.log"
    p.write_bytes(LINE)

    async def scenario(t, items):
        await until(lambda: LINE in data_of(items, "rank0.log"))
        tmp = tmp_path / "swap.tmp"
        if what == "fifo":
            os.mkfifo(tmp)
        else:
            os.symlink("/proc/self/environ", tmp)
        os.replace(tmp, p)  # the name changes at once: no 'deleted' phase in between
        await until(lambda: events(items, "error"), timeout=15)
        await asyncio.sleep(6)  # an observation window: the name is checked every second in it
        items.append(("errors-after-window", len(events(items, "error"))))
        new = tmp_path / "new.tmp"
        new.write_bytes(b"[rank0]: back to a file\n")
        os.replace(new, p)
        await until(lambda: b"back to a file" in data_of(items, "rank0.log"), timeout=20)
        tmp2 = tmp_path / "swap2.tmp"
        os.mkfifo(tmp2)
        os.replace(tmp2, p)  # a second change: said again, once
        await until(lambda: len(events(items, "error")) >= 2, timeout=15)
        await asyncio.sleep(3)

    items = run_tailer([str(p)], scenario, inotify=inotify, poll_max=2.0, poll_max_watched=10.0, timeout=90)
    after = next(n for x, n in (i for i in items if isinstance(i, tuple)))
    assert after == 1, [e.detail for e in events(items, "error")]  # was one a second (16 in 15 s)
    assert len(events(items, "error")) == 2, [e.detail for e in events(items, "error")]


def _cap_events(items):
    return [e for e in events(items, "error") if "--max-files" in e.detail]


def _followed(items):
    return {e.path for e in events(items, "added")}


def test_deleted_files_in_their_grace_period_do_not_count(tmp_path):
    root = tmp_path / "logs"
    root.mkdir()
    first = [root / f"rank{i}.log" for i in range(20)]
    for f in first:
        f.write_bytes(LINE)

    async def scenario(t, items):
        await until(lambda: len(_followed(items)) == 20, timeout=30)
        for f in first:
            f.unlink()
        await until(lambda: len(events(items, "deleted")) == 20, timeout=30)
        for i in range(20, 40):  # the next short-lived files, while the first ones linger
            (root / f"rank{i}.log").write_bytes(LINE)
        await until(lambda: len(_followed(items)) == 40, timeout=30)

    items = run_tailer([str(root)], scenario, max_files=20, timeout=90)
    assert _cap_events(items) == []


def test_the_newest_attempt_is_followed_and_every_left_out_file_is_named(tmp_path):
    root = tmp_path / "logs" / "run"
    for a, n in ((0, 20), (1, 8)):
        for r in range(n):
            d = root / f"attempt_{a}" / str(r)
            d.mkdir(parents=True)
            (d / "stdout.log").write_bytes(LINE)

    async def scenario(t, items):
        await until(lambda: len(_followed(items)) >= 20, timeout=30)
        for r in range(8, 12):  # more files of the new attempt than the cap leaves room for
            d = root / "attempt_1" / str(r)
            d.mkdir(parents=True)
            (d / "stdout.log").write_bytes(LINE)
        await until(lambda: len(set(t.followers) & {str(root / "attempt_1" / str(r) / "stdout.log")
                                                     for r in range(12)}) == 12, timeout=30)
        await until(lambda: any("12 not followed" in e.detail for e in _cap_events(items)), timeout=30)

    items = run_tailer([str(tmp_path / "logs")], scenario, max_files=20, timeout=120)
    msg = _cap_events(items)[-1].detail
    assert "more than 20 files: 12 not followed (e.g. " in msg and "attempt_0" in msg and "raise --max-files" in msg


def test_the_max_files_option_exists_and_is_used(tmp_path):
    for cmd in (["scan", "--follow"], ["watch"]):
        r = subprocess.run([sys.executable, "-m", "denpex_tui", *cmd, "--help"], capture_output=True, text=True,
                           timeout=60)
        assert "--max-files N" in r.stdout, cmd
    r = subprocess.run([sys.executable, "-m", "denpex_tui", "scan", "--follow", "--max-files", "0", str(tmp_path)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--max-files" in r.stderr
