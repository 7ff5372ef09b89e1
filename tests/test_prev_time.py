"""The time before a line (an untimed traceback's, a fatal report's) is the latest timed line of
its stream among the WINDOW_LINES lines (within WINDOW_BYTES) before it, across chunks; else the
latest timed line of any stream there. prev_time reads the window forward, once for all the
lookups of a chunk: on every console we keep, at every third line, in chunks small enough that
the window crosses them, it gives what the rule gives."""

from __future__ import annotations

from pathlib import Path

import pytest

from denpex_tui.core import streamtimes
from denpex_tui.core.catalog import load_catalog
from denpex_tui.core.lines.facts import line_facts
from denpex_tui.core.matcher import Matcher
from denpex_tui.core.pipeline import SourceProcessor
from denpex_tui.core.sources import discover
from helpers import line_chunks

FIX = Path(__file__).parent / "fixtures"


def _consoles():
    out = []
    for d in sorted(p for p in FIX.rglob("*") if p.is_dir()):
        for s in discover([str(d)]).sources:
            if s.kind == "console" and s.path not in {o.path for o in out}:
                out.append(s)
    return out


def _rule(p: SourceProcessor, data: bytes, s: int, key):
    buf = b"".join(p._recent) + data
    at = len(buf) - len(data) + s
    floor = max(0, at - streamtimes.WINDOW_BYTES)
    first, e, n = None, at, 0
    while e > 0 and n < streamtimes.WINDOW_LINES:
        b0 = buf.rfind(b"\n", 0, e - 1) + 1
        if b0 < floor:
            break
        raw, e, n = buf[b0:e - 1], b0, n + 1
        pre = line_facts(raw, p.year_hint) if raw else None
        if pre is None or pre.time is None:
            continue
        if p.stream_of(pre) == key:
            return pre.time
        first = first or pre.time
    return first


# (the last two: chunks read through their lines by stream, as a big console's are, with
# windows inside the chunk and windows that reach before it)
@pytest.mark.parametrize("window_bytes, window_lines, chunk, by_stream",
                         [(256 << 10, 400, 3000, False), (2500, 40, 700, False), (3000, 20, 900, False),
                          (256 << 10, 60, 40_000, True), (2500, 40, 9000, True)])
def test_prev_time_is_the_rule_at_every_third_line_of_every_console(monkeypatch, window_bytes, window_lines, chunk,
                                                                    by_stream):
    monkeypatch.setattr(streamtimes, "WINDOW_BYTES", window_bytes)
    monkeypatch.setattr(streamtimes, "WINDOW_LINES", window_lines)
    monkeypatch.setattr(streamtimes, "JUMP_MIN_BYTES", 1 if by_stream else 1 << 40)
    used = []  # the lookups the lines by stream answered
    by_stream_rule = streamtimes.StreamTimesMixin._prev_time_by_stream

    def by_stream_counted(self, *a):
        got = by_stream_rule(self, *a)
        used.extend([got] if got is not None else [])
        return got

    monkeypatch.setattr(streamtimes.StreamTimesMixin, "_prev_time_by_stream", by_stream_counted)
    m = Matcher(load_catalog(include_user=False))
    consoles = _consoles()
    assert len(consoles) >= 8
    asked = timed = 0
    for info in consoles:
        p = SourceProcessor(info, m)
        data_all = Path(info.path).read_bytes()
        off = 0
        for data in line_chunks(data_all if data_all.endswith(b"\n") else data_all + b"\n", chunk):
            p.chunk_begin(data, off)
            s, k = 0, 0
            while s < len(data):
                e = data.find(b"\n", s)
                k += 1
                if k % 3:  # every third line (the rule reads up to 400 lines for each)
                    s = e + 1
                    continue
                pre = line_facts(data[s:e], p.year_hint)
                for key in (p.stream_of(pre), None):
                    want = _rule(p, data, s, key)
                    assert p.prev_time(data, s, key) == want, (info.path, off + s, key)
                    asked += 1
                    timed += want is not None
                s = e + 1
            p.chunk_end(data)
            off += len(data)
    assert asked > 2000 and timed > asked // 3, (asked, timed)
    # (half the lookups are for no stream, and those near a chunk's start reach before it: the
    # forward read answers them)
    assert (len(used) > 300 and sum(u[0] is not None for u in used) > len(used) // 2) if by_stream else not used, \
        (len(used), asked)
