"""What a source's processor keeps of its history for later look-backs (core/streamtimes.py):
the lines a look-back can reach (the last WINDOW_LINES lines within WINDOW_BYTES) and the
follower's HANDOFF_BYTES, not all of the last WINDOW_BYTES. The findings of the lines that
follow are the same as with the whole window kept; the history's workers carry back and the
job holds a quarter of it per source (64 MB -> 16 MB for a 256-file job)."""

from __future__ import annotations

from denpex_tui.core import streamtimes
from denpex_tui.core.catalog import load_catalog
from denpex_tui.core.job import ProcessorResult
from denpex_tui.core.matcher import Matcher
from denpex_tui.core.pipeline import SourceProcessor
from denpex_tui.core.sources import classify
from helpers import CORPUS


def _run(path, first: bytes, rest: bytes):
    m = Matcher(load_catalog(include_user=False), error_words=False)
    p = SourceProcessor(classify(str(path)), m, year_hint=2026)
    p.feed(first, 0)
    kept = p._recent_bytes
    p.feed(rest, len(first))
    p.close()
    r = ProcessorResult.of(p)
    return kept, [(f.signature, f.line, f.time, f.time_approx, f.rank) for f in r.findings]


def test_the_findings_after_a_big_chunk_are_the_same_with_less_kept(monkeypatch):
    """A real console (its ranks' untimed tracebacks take the time of the line before them)
    after 2 MB of its own timed lines, in two chunks: the same findings, times and all."""
    path = CORPUS / "fd_leak_emfile" / "console.log"
    data = path.read_bytes()
    timed = b"".join(x for x in data.splitlines(keepends=True) if x.startswith(b"[default") and b" INFO " in x)
    first = timed * (2_000_000 // len(timed) + 1)
    rest = data[data.rfind(b"\n", 0, data.index(b"Traceback")) + 1:]
    assert b"Traceback" in rest.split(b"\n", 1)[0]  # the second chunk opens with an untimed line
    kept, got = _run(path, first, rest)
    assert got
    assert streamtimes.HANDOFF_BYTES <= kept < streamtimes.WINDOW_BYTES // 2
    monkeypatch.setattr(streamtimes, "WINDOW_LINES", 10 ** 9)  # keep the whole window, as before
    kept_all, want = _run(path, first, rest)
    assert kept_all > streamtimes.WINDOW_BYTES - 4096
    assert got == want
    assert any(f[3] for f in got)  # some finding's time came from a line before it (approx)


def _kept_by_rule(data: bytes) -> bytes:
    """The whole lines a look-back can reach, found line by line from the end."""
    n = len(data)
    cut = data.find(b"\n", n - streamtimes.WINDOW_BYTES) + 1
    if not 0 < cut < n:
        return data[-streamtimes.WINDOW_BYTES:]
    e = n - 1
    for _ in range(streamtimes.WINDOW_LINES):
        e = data.rfind(b"\n", cut, e)
        if e < 0:
            break
    lines_from = e + 1 if e >= 0 else cut
    handoff = data.rfind(b"\n", cut, n - streamtimes.HANDOFF_BYTES) + 1 or cut
    return data[max(cut, min(lines_from, handoff)):]


def test_what_a_big_chunk_leaves_behind_is_its_last_lines_by_the_rule(monkeypatch):
    data = (CORPUS / "fd_leak_emfile" / "console.log").read_bytes()
    data = data * (600_000 // len(data) + 1)
    data = data[:data.rfind(b"\n") + 1]
    for lines in (1, 2, 37, 400, 2000, 10 ** 9):
        monkeypatch.setattr(streamtimes, "WINDOW_LINES", lines)
        for size in (streamtimes.WINDOW_BYTES, streamtimes.WINDOW_BYTES + 1, 300_000, len(data)):
            chunk = data[len(data) - size:]
            chunk = chunk[chunk.find(b"\n") + 1:] if size < len(data) else chunk
            if len(chunk) < streamtimes.WINDOW_BYTES:
                continue
            p = SourceProcessor(classify(str(CORPUS / "fd_leak_emfile" / "console.log")),
                                Matcher(load_catalog(include_user=False), error_words=False))
            p.chunk_end(chunk)
            assert p._recent[0] == _kept_by_rule(chunk), (lines, size)
