"""While a console's traceback is open, the pipeline jumps from one line of that traceback's
stream (or a candidate line) to the next instead of reading every line in between through the
door (core/streamjump.py, issue 18: a job's logs as one file spent 4.8 s of 6.4 s reading other
ranks' lines one by one). What it finds must not change: every corpus console, and every corpus
job as one file (``cat console.log logs/*/*.log``), cut into chunks of several sizes, gives the
same findings, unknown lines, stop marks, ranks and line count with the jump as without it."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import line_chunks as _chunks

from denpex_tui.core import pipeline, streamjump, streamtimes
from denpex_tui.core.catalog import load_catalog
from denpex_tui.core.lines.chunk import console_streams, line_starts
from denpex_tui.core.lines.facts import line_facts
from denpex_tui.core.matcher import Matcher
from denpex_tui.core.model import SourceInfo
from denpex_tui.core.pipeline import SourceProcessor
from denpex_tui.core.streamjump import covers

CORPUS = Path(__file__).parent / "fixtures" / "corpus"
CASES = sorted(p.parent for p in CORPUS.glob("*/console.log"))
MATCHER = Matcher(load_catalog(include_user=False))


def _one_file(case: Path) -> bytes:
    parts = [(case / "console.log").read_bytes()] + [p.read_bytes() for p in sorted((case / "logs").rglob("*.log"))]
    return b"".join(x if x.endswith(b"\n") or not x else x + b"\n" for x in parts)


def _read(data: bytes, size: int) -> dict:
    p = SourceProcessor(SourceInfo(path="/job/console.log", kind="console"), MATCHER)
    off = 0
    for part in _chunks(data, size):
        p.feed(part, off)
        off += len(part)
    p.close()
    return {
        "findings": sorted((k, f.signature, f.line, f.offset, f.rank, f.local_rank, f.text, f.count)
                           for k, f in ((repr(k), f) for k, f in p.findings.items())),
        "unknown": p.unknown,
        "stop_marks": {k: (v.line, v.offset) for k, v in p.stop_marks.items()},
        "rank_pairs": p.rank_pairs,
        "keys_seen": p.keys_seen,
        "line_no": p.line_no,
        "first_error": repr(p.first_error),
    }


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name)
@pytest.mark.parametrize("whole", [False, True], ids=["console", "one-file"])
@pytest.mark.parametrize("size", [4096, 1 << 16, 8 << 20])
def test_the_jump_finds_what_reading_every_line_finds(case, whole, size, monkeypatch):
    data = _one_file(case) if whole else (case / "console.log").read_bytes()
    jumps = []
    orig = streamjump.StreamLines.next_of
    monkeypatch.setattr(streamjump.StreamLines, "next_of", lambda *a: jumps.append(1) or orig(*a))
    monkeypatch.setattr(pipeline, "JUMP_MIN_BYTES", 0)
    monkeypatch.setattr(streamtimes, "JUMP_MIN_BYTES", 0)
    with_jump = _read(data, size)
    monkeypatch.setattr(pipeline, "JUMP_MIN_BYTES", 1 << 62)
    monkeypatch.setattr(streamtimes, "JUMP_MIN_BYTES", 1 << 62)
    every_line = _read(data, size)
    assert with_jump == every_line
    if "clean" not in case.name:
        assert with_jump["findings"]
    if whole and "clean" not in case.name:
        assert jumps  # the ranks' tracebacks were open over other lines: the jump was taken


def _fixtures():
    for p in sorted((CORPUS.parent).rglob("*")):
        if p.is_file() and p.suffix in (".log", ".txt", ".out", ".err"):
            data = p.read_bytes()
            if data and b"\0" not in data[:4096]:
                yield p, data if data.endswith(b"\n") else data + b"\n"


def test_the_label_streams_of_a_chunk_are_the_doors_on_every_fixture_line():
    # the jump serves tracebacks open on a label's stream ('l', 't', 'g'): a line of such a
    # stream must never be taken for another one (a host's stream or none it may mistake: a
    # traceback open on one of those is read line by line)
    n = 0
    for case, data in _fixtures():
        starts = line_starts(data)
        ids, keys = console_streams(data, starts)
        for i, s in enumerate(starts.tolist()):
            e = data.find(b"\n", s)
            door, fast = line_facts(data[s:e]).stream_key(), keys[ids[i]]
            if covers([door]) or covers([fast]):
                assert fast == door, (case.name, data[s:e][:120])
        n += len(starts)
    assert n > 10_000


def test_under_a_users_prefix_template_the_tracebacks_are_read_line_by_line(monkeypatch):
    # the heads say nothing under a template: the chunk's every line would go through the door to
    # learn its stream, more than the line-by-line read costs
    from denpex_tui.core.lines.formats import set_prefix_template

    case = next(c for c in CASES if "clean" not in c.name)
    data = _one_file(case)
    monkeypatch.setattr(pipeline, "JUMP_MIN_BYTES", 0)
    monkeypatch.setattr(streamtimes, "JUMP_MIN_BYTES", 0)
    built = []
    orig = streamjump.StreamLines.__init__
    monkeypatch.setattr(streamjump.StreamLines, "__init__", lambda self, d: built.append(1) or orig(self, d))
    set_prefix_template("[${role_name}${local_rank}|${rank}]:")
    try:
        got = _read(data, 1 << 16)
    finally:
        set_prefix_template(None)
    assert got["findings"] and not built
    assert _read(data, 1 << 16)["findings"] and built  # and without it, the jump is taken
