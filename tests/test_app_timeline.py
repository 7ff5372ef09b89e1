"""The merged timeline over the whole history: time order across files, tracebacks kept under
their message, every line reachable (g, search) on a 1 GB job with bounded memory."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from test_app_support import make_app, shown_lines, until

from denpex_tui.core.lines.chunk import chunk_lines
from denpex_tui.core.lines.index import CHECKPOINT_BYTES, MAX_SHOW, FileIndex
from denpex_tui.core.lines.reader import read_chunks
from denpex_tui.app.timeline import Timeline
from denpex_tui.app.widgets.logview import LogView

CORPUS = os.path.join(os.path.dirname(__file__), "fixtures", "corpus")


def run(coro):
    return asyncio.run(coro)


def _timeline(path: str) -> Timeline:
    tl = Timeline()
    tl.add_paths([path])
    tl.build()
    return tl


def test_finished_multi_rank_job_is_merged_by_time_with_tracebacks_attached():
    tl = _timeline(os.path.join(CORPUS, "enospc_checkpoint_fastfail"))
    rows = [tl.locate(s) for s in tl.default.seqs]
    texts = [tl.text_of(sid, l0)[0].text for sid, l0 in rows]
    # every rank's "Starting on host" comes before any rank's first step: interleaved, not file after file
    starts = [i for i, t in enumerate(texts) if "train: Starting on host" in t]
    first_step = next(i for i, t in enumerate(texts) if "train: step 1/" in t)
    assert len(starts) == 4 and max(starts) < first_step
    # time never goes backwards in the merged order (a line's time: its own, never earlier than
    # the one before it in its file)
    from denpex_tui.core.lines.facts import parse_line
    latest: dict[int, float] = {}
    times = []
    for (sid, _l), x in zip(rows, texts):
        t = parse_line(x).epoch
        if t is not None:
            latest[sid] = max(t, latest.get(sid, t))
            times.append(latest[sid])
    assert len(times) > 100 and times == sorted(times)
    # rank 2's stderr traceback (no timestamps) is one block, right after rank 2's last stdout line
    name = [m.name for m in tl.sources]
    err2 = next(i for i, m in enumerate(tl.sources) if m.name.endswith("attempt_0/2/stderr.log"))
    out2 = next(i for i, m in enumerate(tl.sources) if m.name.endswith("attempt_0/2/stdout.log"))
    at = [k for k, (sid, _l) in enumerate(rows) if sid == err2]
    assert at == list(range(at[0], at[0] + len(at)))  # contiguous, in line order
    assert [rows[k][1] for k in at] == list(range(len(at)))
    assert rows[at[0] - 1][0] == out2 and rows[at[0] - 1][1] == tl.counts[out2] - 1, name
    # the console's copies of per-rank lines are hidden by default, its own lines are not
    console = next(i for i, m in enumerate(tl.sources) if m.info.kind == "console")
    shown = {l0 for sid, l0 in rows if sid == console}
    assert 0 < len(shown) < tl.counts[console]
    assert all(not tl.text_of(console, l0)[0].text.startswith("[default") for l0 in shown)


def test_line_index_reads_back_any_line_and_bounds_a_huge_one(tmp_path):
    p = tmp_path / "rank0.log"
    huge = 3 * CHECKPOINT_BYTES + 5 * MAX_SHOW
    with open(p, "wb") as f:
        for i in range(5000):
            f.write(f"2026-11-29 17:40:{i % 60:02d},000 INFO line {i}\n".encode())
        f.write(b"x" * huge + b"\n")
        f.write(b"after the long line\n")
        f.write(b"unterminated")
    def index(chunk: int) -> FileIndex:
        idx = FileIndex(str(p), 0)
        box: dict = {}
        for off, data in read_chunks(str(p), chunk=chunk, progress=box):
            idx.add(chunk_lines(off, data, console=False, year_hint=2026))
        idx.end = box["stop"]
        return idx

    idx = index(1 << 20)
    assert idx.lines == 5003 and idx.end == os.path.getsize(p)
    assert idx.read_lines(4321, 1)[0][0].endswith(b"line 4321")
    (raw, cut), (after, cut2), (last, cut3) = idx.read_lines(5000, 3)
    assert cut and len(raw) == MAX_SHOW and not cut2 and after == b"after the long line"
    assert last == b"unterminated" and not cut3
    first, _t, _end = idx.take_records()
    counts = list(np.diff(np.append(first, idx.lines)))
    # seconds 0..59, then the clock "goes back" each minute: those times are raised to 17:40:59,
    # and consecutive lines of one time are one record (it runs on to the file's last line)
    assert sum(counts) == 5003 and counts[:59] == [1] * 59 and counts[-1] == 5003 - 59
    idx2 = index(4096)  # the same index, whatever the chunks
    assert idx2.read_lines(2500, 1) == idx.read_lines(2500, 1)
    assert list(idx2.take_records()[0]) == list(first)


def _write_big(path, total: int) -> str:
    """A ~``total`` byte log: a unique first line, then real-looking training lines."""
    first = b"2026-11-29 17:40:10,913 INFO [rank0/8] train: Starting on host vm pid 30542 EARLY-7f3a\n"
    block = b"".join(f"2026-11-29 17:{40 + i // 6000:02d}:{(i // 100) % 60:02d},{i % 1000:03d} INFO [rank0/8] "
                     f"train: step {i}/100000 | epoch 0 | loss 2.9104 | acc 0.023 | grad_norm 1.23\n".encode()
                     for i in range(20000))
    with open(path, "wb") as f:
        f.write(first)
        n = len(first)
        while n < total:
            f.write(block)
            n += len(block)
    return first.decode().strip()


@pytest.fixture(scope="module")
def big_job(tmp_path_factory):
    root = tmp_path_factory.mktemp("big")
    first = _write_big(root / "rank0.log", 1 << 30)
    yield str(root), first
    shutil.rmtree(root, ignore_errors=True)


def _view_bytes(tl: Timeline) -> int:
    seqs = tl.default.seqs
    n = len(tl.src) + (0 if seqs is None else len(seqs) * seqs.itemsize)
    n += sum(len(c) * 8 for c in tl.ck)
    for m in tl.sources:
        n += (len(m.index.ck_off) + len(m.index.ck_line)) * 8
        n += 0 if m.tags is None else len(m.tags) * m.tags.itemsize
    return n


def test_a_1gb_job_opens_with_its_first_line_reachable_and_found_by_search(big_job):
    root, first = big_job

    async def main():
        app = make_app(root, keep_lines=200)
        async with app.run_test(size=(120, 36)) as pilot:
            log = app.query_one(LogView)
            assert await until(pilot, lambda: log.buf.tl.built and log.row_count > 8_000_000, timeout=60)
            await pilot.press("g")
            _, ll = log.line_at_cursor()
            assert ll.line == 1 and ll.text == first
            await pilot.press("G")
            await pilot.press("slash", *"early-7f3a", "enter")
            assert await until(pilot, lambda: app._matches is not None, timeout=60)
            _, ll = log.line_at_cursor()
            assert ll.line == 1 and "1 of 1" in str(app.query_one("#log-box").border_subtitle)
            assert _view_bytes(log.buf.tl) < 16 << 20  # the view's own index: ~9 MB for 8 M lines

    run(main())


def test_the_view_of_a_1gb_job_stays_under_200mb_rss(big_job):
    """In a fresh interpreter: index the 1 GB job, read its first and last lines back, search
    the whole of it for its first line; the process's RSS stays under 200 MB."""
    root, first = big_job
    script = textwrap.dedent(f"""
        import psutil, time
        from denpex_tui.app.timeline import Timeline
        from denpex_tui.app.search import SearchQuery, find_all
        t = time.perf_counter()
        tl = Timeline(); tl.add_paths([{root!r}]); tl.build()
        opened = time.perf_counter() - t
        assert tl.text(0)[0].text == {first!r}
        tl.text(tl.rows - 1)
        m = find_all(tl, SearchQuery("early-7f3a"))
        assert list(m.seqs) == [0], list(m.seqs)
        print(tl.rows, round(opened, 2), psutil.Process().memory_info().rss >> 20)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True)
    rows, opened, rss = out.stdout.split()
    assert int(rows) > 8_000_000 and int(rss) < 200, out.stdout


def test_an_exec_source_is_in_the_timeline_with_its_rank(tmp_path):
    """--exec output is no file: the view keeps its lines in a private spool file."""
    script = tmp_path / "emit.py"
    script.write_text("print('2026-11-29 17:40:10,000 INFO [rank3/4] train: step 1')\n"
                      "print('2026-11-29 17:40:11,000 ERROR [rank3/4] train: Checkpoint save failed')\n")
    cmd = f"3={sys.executable} {script}"

    async def main():
        app = make_app(str(tmp_path / "no-logs-here"), execs=[cmd])
        app.options.paths = []
        async with app.run_test(size=(120, 36)) as pilot:
            log = app.query_one(LogView)
            assert await until(pilot, lambda: log.row_count >= 2, timeout=20)
            lines = shown_lines(log)
            assert [ll.text for ll in lines][-1].endswith("Checkpoint save failed")
            assert {ll.rank for ll in lines} == {3}

    run(main())


def test_rank_files_of_a_log_dir_tree_show_their_global_rank_once_the_job_maps_them(tmp_path):
    """torchrun's attempt_0/N/stdout.log is local rank N: its rows showed no rank at all ('·')
    when they were drawn before the job's rank map came (the view kept the lines it had made)."""
    from test_app_support import settle, write_healthy_job

    root = write_healthy_job(tmp_path / "run", steps=8)

    async def main():
        app = make_app(root)
        async with app.run_test(size=(120, 36)) as pilot:
            await settle(app, pilot, incident=False, quiet=0.4)
            log = app.query_one(LogView)
            ranks = {}
            for i in range(log.buf.count):
                e = log.buf.entry(i)
                ll = log.buf.line(e) if isinstance(e, int) else None
                if ll is not None and "/attempt_0/" in ll.source:
                    ranks.setdefault(ll.source.split("/attempt_0/")[1].split("/")[0], set()).add(ll.rank)
            return ranks

    ranks = run(main())
    assert ranks and all(got == {int(local)} for local, got in ranks.items()), ranks


def test_a_line_that_just_arrived_is_fresh_whatever_its_clock_says(tmp_path):
    """A rank whose clock is two days behind: its live line is 0 s old in the ranks table, not
    '2.0d' (the age came from the log's own timestamp)."""
    from test_app_support import NOW

    root = tmp_path / "job"
    root.mkdir()
    log = root / "rank3.log"
    log.write_text("2026-11-27 18:40:00,001 INFO [rank3/8] train: step 1/60 | loss 2.0421\n")

    async def main():
        app = make_app(str(root))
        async with app.run_test(size=(120, 36)) as pilot:
            assert await until(pilot, lambda: 3 in app.state.ranks and app.state.ranks[3].last_seen is not None, 20)
            before = app.state.ranks[3].last_seen
            with open(log, "a") as fh:
                fh.write("2026-11-27 18:40:05,002 INFO [rank3/8] train: step 2/60 | loss 2.0317\n")
            fresh = await until(pilot, lambda: app.state.ranks[3].last_seen == NOW, 20)
            return before, app.state.ranks[3].last_seen, fresh

    before, after, fresh = run(main())
    assert NOW - before > 86400  # the history line: its log's time
    assert fresh, (before, after)


def test_an_index_keeps_record_lines_in_4_bytes_until_a_file_passes_2_to_the_32_lines():
    idx = FileIndex("/rank0.log", 0)
    idx.append_records(np.array([0, 7, 9]), np.array([1.8e9, 1.8e9 + 1, 1.8e9 + 1]))
    assert idx.rec_line.itemsize == 4 and list(idx.record_lines()) == [0, 7]  # 9: the same time as 7
    idx.append_records(np.array([(1 << 32) + 5]), np.array([1.8e9 + 2]))
    idx.lines = (1 << 32) + 6
    first, t, end = idx.take_records()
    assert list(first) == [0, 7, (1 << 32) + 5] and list(t) == [1.8e9, 1.8e9 + 1, 1.8e9 + 2]
    assert end == (1 << 32) + 6 and not len(idx.rec_line)
