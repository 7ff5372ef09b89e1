"""The one door for line facts: the per-line rules and their whole-chunk fast paths give the same
answer on every line of every fixture and on generated lines; the reader's offsets are exact
whatever the chunk size; and the facts a line gets are the same in the pipeline and in the view."""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from denpex_tui.core.lines import chunktimes, reader, times
from denpex_tui.core.lines.chunk import console_tags, line_starts, newlines, tag_of
from denpex_tui.core.lines.facts import line_facts, parse_line
from denpex_tui.core.lines.chunktimes import chunk_times
from denpex_tui.core.lines.times import line_time

FIX = Path(__file__).parent / "fixtures"


def _logs():
    for p in sorted(FIX.rglob("*")):
        if p.is_file() and p.name != "truth.json" and p.suffix in (".log", ".txt", ".out", ".err", ".json"):
            data = p.read_bytes()
            if data and b"\0" not in data[:4096]:
                yield p, data if data.endswith(b"\n") else data + b"\n"


def _per_line_times(data: bytes, starts, hint):
    out = np.full(len(starts), np.nan)
    for i, s in enumerate(starts.tolist()):
        e = int(starts[i + 1]) if i + 1 < len(starts) else len(data)
        stamp = line_time(data[s:min(e, s + times.HEAD + 40)], hint)
        if stamp is not None:
            out[i] = stamp.epoch
            if stamp.full_date:
                hint = stamp.dt.year
    return out


_MODES = ("default", "line-starts", "whole-chunk")


def _mode(mode: str):
    """The ways chunk_times can take a chunk: as it chooses; every line read at its start and
    the others one by one, however many; every colon pair of the chunk (the whole-chunk pass)."""
    from denpex_tui.core.lines import chunktimes

    saved = (chunktimes._FEW, chunktimes._at_line_starts)
    if mode == "line-starts":
        chunktimes._FEW = 0
    elif mode == "whole-chunk":
        chunktimes._at_line_starts = lambda *a: None

    def undo():
        chunktimes._FEW, chunktimes._at_line_starts = saved
    return undo


@pytest.mark.parametrize("mode", _MODES)
def test_the_time_rule_in_numpy_is_the_per_line_rule_on_every_fixture_line(monkeypatch, mode):
    monkeypatch.setattr(times, "VECTOR_MIN_BYTES", 0)
    undo = _mode(mode)
    try:
        n = 0
        for p, data in _logs():
            starts = line_starts(data)
            if len(starts) < 64:
                data = data * (64 // len(starts) + 1)  # the numpy path starts at 64 lines
                starts = line_starts(data)
            for hint in (2026, None):
                got = chunk_times(data, starts, hint)
                fast = got.epoch
                slow = _per_line_times(data, starts, hint)
                same = (np.isnan(fast) & np.isnan(slow)) | (fast == slow)
                assert same.all(), (p, [data[int(starts[i]):int(starts[i]) + 120] for i in np.flatnonzero(~same)[:3]])
                assert got.year_hint == chunktimes._per_line(data, starts, hint).year_hint, p
            n += len(starts)
        assert n > 10_000
    finally:
        undo()


_STAMPS = st.sampled_from([
    "2026-11-29 17:40:16,343", "2026-11-29T17:40:16.343Z", "2026-11-29_17:40:16", "[2026-11-29 17:40:16.123456789]",
    "2026-11-29 17:40:16+05:30", "2026-11-29 17:40:16-0700", "E1129 17:40:18.662000", "[W1129 17:40:18.5]",
    "01/02/2024 00:20:14", "2026-13-29 17:40:16", "2026-02-30 10:00:00", "0001-01-01 00:00:00", "25:61:61",
    "2026-11-29 17:40", "I0229 10:00:00", "x1129 17:40:18", "17:40:16",
    "2026-11-29 17:40:16.5+25:00", "2026-11-29T17:40:16-07", "2026-11-29 17:40:16+0560", "2026-11-29 17:40:16,1-",
])
_BITS = st.sampled_from(["[default3]:", "[rank2]: ", "  5: ", "node-1:185:1027 [7] ", "INFO ", " ", "ab", "é", "\t"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.one_of(_STAMPS, _BITS), max_size=6).map("".join), min_size=64, max_size=90),
       st.sampled_from([None, 2024, 2026]))
def test_the_time_rule_in_numpy_is_the_per_line_rule_on_generated_lines(lines, hint):
    data = ("\n".join(lines) + "\n").encode()
    starts = line_starts(data)
    old = times.VECTOR_MIN_BYTES
    times.VECTOR_MIN_BYTES = 0
    try:
        got = {}
        for mode in _MODES:
            undo = _mode(mode)
            try:
                got[mode] = chunk_times(data, starts, hint)
            finally:
                undo()
    finally:
        times.VECTOR_MIN_BYTES = old
    slow = _per_line_times(data, starts, hint)
    for mode, ct in got.items():
        assert ((np.isnan(ct.epoch) & np.isnan(slow)) | (ct.epoch == slow)).all(), mode
        assert ct.year_hint == chunktimes._per_line(data, starts, hint).year_hint, mode
    fast = got["default"]
    assert ((np.isnan(fast.epoch) & np.isnan(slow)) | (fast.epoch == slow)).all()


@pytest.mark.parametrize("hs_min", [0, 1 << 40])  # a launcher's words by Hyperscan (when installed), by RE2
def test_console_tags_are_the_doors_ranks_on_every_fixture_line(monkeypatch, hs_min):
    from denpex_tui.core.patterns import LineScan

    monkeypatch.setattr(LineScan, "hs_min", hs_min)
    n = 0
    for p, data in _logs():
        starts = line_starts(data)
        fast = console_tags(data, starts)
        for i, s in enumerate(starts.tolist()):
            e = data.find(b"\n", s)
            assert fast[i] == tag_of(*line_facts(data[s:min(e, s + 512)]).ranks()), (p, data[s:e][:120])
        n += len(starts)
    assert n > 10_000


def test_go_zero_time_and_impossible_dates_are_no_time():
    """Issue 19 (5): a sidecar's ``time="0001-01-01 00:00:00 +0000 UTC"`` is not a moment."""
    assert parse_line('time="0001-01-01 00:00:00 +0000 UTC" level=info msg="starting"').time is None
    assert parse_line("[0001-01-01 00:00:00] worker up").time is None
    assert parse_line("2026-02-30 10:00:00 x").time is None
    t = parse_line("[0001-01-01 00:00:00] then 2026-11-29 17:40:16,343 INFO x")
    assert t.time is not None and t.time.year == 2026  # the next candidate in the head


def test_an_nccl_prefix_time_is_the_lines_time_in_the_pipeline_and_the_view():
    raw = b"[2025-03-04 10:11:12.123] node-1:185:1027 [7] NCCL WARN Call to bind failed : Address already in use"
    f = line_facts(raw)
    assert f.time is not None and f.time.microsecond == 123000
    assert parse_line(raw.decode()).epoch == f.epoch  # the view reads the text, the pipeline the bytes


def test_a_launcher_line_through_a_task_label_has_no_rank_anywhere():
    """srun relays slurmstepd's and its own lines through task 0's label: they are the
    launcher's, not rank 0's (the pipeline said None and the view said 0)."""
    line = "  0: srun: error: gpu-node-3: task 5: Exited with exit code 1"
    assert parse_line(line).ranks() == (None, None)
    data = (line + "\n").encode()
    assert console_tags(data, line_starts(data))[0] == 0


CORPUS = Path(__file__).resolve().parent / "fixtures" / "corpus"  # (the shared corpus's runs, kept in the repo)


def test_a_chunk_is_one_read_that_ends_at_a_line_end(tmp_path):
    """Each chunk of a text file is the read's own bytes: the read ends at the last newline it
    can hold (no partial line cut off and copied onto the next chunk), and a range's last read
    at the first line end at or after the range's end."""
    console = CORPUS / "enospc_checkpoint_fastfail" / "console.log"
    data = console.read_bytes() * 40
    p = tmp_path / "console.log"
    p.write_bytes(data)
    size = 1 << 16
    chunks = list(reader.read_chunks(str(p), chunk=size))
    assert b"".join(d for _, d in chunks) == data
    for (off, d), (nxt, _) in zip(chunks, chunks[1:]):
        assert off + len(d) == nxt and d.endswith(b"\n") and len(d) <= size
        assert len(d) + data.index(b"\n", nxt) + 1 - nxt > size  # the next line did not fit
    end = len(data) // 2 + 12345
    box: dict = {}
    last = list(reader.read_chunks(str(p), chunk=size, start=0, end=end, progress=box))[-1]
    assert last[0] + len(last[1]) == data.index(b"\n", end - 1) + 1 == box["read"]  # nothing read past it


def test_reader_offsets_are_exact_and_ranges_join_to_the_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(reader, "MAX_LINE", 1000)
    rnd = random.Random(7)
    for trial in range(120):
        lines = [bytes(rnd.choice(b"ab ") for _ in range(rnd.choice([0, 5, 999, 1000, 1001, 2500])))
                 for _ in range(rnd.randint(1, 40))]
        data = b"\n".join(lines) + (b"\n" if rnd.random() < 0.5 else b"")
        p = tmp_path / f"t{trial}.log"
        p.write_bytes(data)
        want, pos = [], 0
        while pos < len(data):
            nl = data.find(b"\n", pos)
            nl = len(data) if nl < 0 else nl
            want.append((pos, data[pos:nl][:1000]))
            pos = nl + 1
        for chunk, probe in ((7, 4096), (300, 4096), (300, 64), (300, 3), (1 << 20, 4096), (1 << 20, 1500)):
            monkeypatch.setattr(reader, "_PROBE", probe)  # the page looked at for the read's last newline
            got = []
            for off, d in reader.read_chunks(str(p), chunk=chunk):
                q = 0
                for ln in d.split(b"\n")[:-1]:
                    got.append((off + q, ln))
                    q += len(ln) + 1
            assert got == want
        if not data:
            continue
        cuts = sorted({c for c in (reader.line_start_after(str(p), rnd.randrange(1, len(data) + 1))
                                   for _ in range(3)) if c})
        bounds = [0, *[c for c in cuts if c > 0]]
        joined = []
        for a, b in zip(bounds, bounds[1:] + [None]):
            for off, d in reader.read_chunks(str(p), start=a, end=b):
                q = 0
                for ln in d.split(b"\n")[:-1]:
                    joined.append((off + q, ln))
                    q += len(ln) + 1
        assert joined == want, (bounds, os.path.getsize(p))


# Real lines (failure-messages.md D1, G4, B2) for the console-tag edge cases below.
_D1 = (b"[rank0]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank 0] Watchdog caught collective "
       b"operation timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=131072000, NumelOut=131072000, "
       b"Timeout(ms)=600000) ran for 600081 milliseconds before timing out.")
_G4 = (b"  0: slurmstepd: error: Detected 1 oom_kill event in StepId=1234.0. Some of the step tasks have "
       b"been OOM Killed.")
_B2 = b"[2024-04-09 15:39:37,942] [INFO] [logging.py:96:log_dist] [Rank 3]"


def _door_tags(data: bytes) -> list[int]:
    return [tag_of(*line_facts(ln[:512]).ranks()) for ln in data.split(b"\n")[:-1]]


def test_console_tags_hold_at_the_chunks_end_and_through_a_launcher_relay():
    """An in-text tag in the chunk's last bytes (its window runs past the end), a launcher's
    line relayed through a task label, and ordinary labelled lines: each tag is the door's."""
    data = b"\n".join([_D1, _G4, _D1.replace(b"[rank0]", b"[rank5]"), _B2]) + b"\n"
    assert console_tags(data, line_starts(data)).tolist() == _door_tags(data)
    assert console_tags(data, line_starts(data)).tolist()[1] == 0  # slurmstepd's, not task 0's


def test_console_tags_are_right_when_every_row_hash_collides(monkeypatch):
    """The distinct in-text tags are grouped by a hash, checked row for row: with every hash
    equal, the check fails and the rows themselves are sorted, giving the same tags."""
    from denpex_tui.core.lines import rows

    data = b"".join(ln + b"\n" for ln in (_D1, _B2, _B2.replace(b"[Rank 3]", b"[Rank 7]"), _B2)) * 40
    want = console_tags(data, line_starts(data)).tolist()
    monkeypatch.setattr(rows, "row_hash", lambda u: np.zeros(len(u), dtype=np.uint64))
    assert console_tags(data, line_starts(data)).tolist() == want == _door_tags(data)
    assert len(set(want)) > 2


def test_a_console_chunk_shorter_than_an_in_text_tag_is_tagged():
    """A live console chunk can be one short line: failure-messages D5's ``[rank13]: Last
    error:`` (20 bytes with its newline, shorter than the longest in-text tag) raised
    'window shape cannot be larger than input array shape' in the view's index."""
    data = b"[rank13]: Last error:\n"
    assert console_tags(data, line_starts(data)).tolist() == _door_tags(data)


def test_a_line_asked_again_gets_its_own_years_time_and_a_changed_buffer_is_read_again():
    # glog writes no year: the same line object asked with two hints (two files' years) must get
    # each one's year, not the answer kept for the last question
    line = b"E1129 17:40:18.662000 30537 torch/distributed/elastic/multiprocessing/api.py:1002] failed"
    assert line_time(line, 2025).dt.year == 2025
    assert line_time(line, 2026).dt.year == 2026
    buf = bytearray(b"2026-11-29 17:40:16,343 INFO train: step 1")
    assert line_time(buf).dt.minute == 40
    buf[14:16] = b"41"  # a reused buffer holds another line now
    assert line_time(buf).dt.minute == 41


def test_in_text_rank_tags_found_in_numpy_are_the_regular_expressions_on_every_fixture():
    from denpex_tui.core.lines.chunk import _TEXT_RANK, _text_marks

    checked = 0
    for path, data in _logs():
        pos, codes, tags = _text_marks(data)
        got = [(int(p), tags[int(c) - 1]) for p, c in zip(pos, codes)]
        assert got == [(m.start(), m.group(0)) for m in _TEXT_RANK.finditer(data)], path
        checked += len(got)
    assert checked > 1000


def test_newlines_count_as_bytes_count_on_every_span():
    """The line counter (bytes.count on short spans, numpy blocks on long ones) counts what
    bytes.count counts, on spans on both sides of each switch and at the ends."""
    from denpex_tui.core.lines import chunk

    data = (CORPUS / "enospc_checkpoint_fastfail" / "console.log").read_bytes() * 30
    rnd = random.Random(5)
    edges = [0, 1, chunk._NP_SPAN - 1, chunk._NP_SPAN, chunk._NP_SPAN + 1, chunk._NP_BLOCK - 1,
             chunk._NP_BLOCK, chunk._NP_BLOCK + 1, 3 * chunk._NP_BLOCK + 7]
    for width in edges + [rnd.randrange(len(data)) for _ in range(20)]:
        for lo in (0, 1, rnd.randrange(len(data)), max(0, len(data) - width)):
            assert newlines(data, lo, lo + width) == data.count(b"\n", lo, lo + width), (lo, width)
    assert newlines(data) == data.count(b"\n") and newlines(data, len(data) - 5, None) == data[-5:].count(b"\n")
