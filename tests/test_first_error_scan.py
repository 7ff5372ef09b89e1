"""A rank file's first error line is found from the lines a multi-pattern scan flags
(Hyperscan for big chunks, RE2 for small ones): both give, on every fixture log and in chunks of
several sizes, the line that the first-error rule finds walking every match of the chunk."""

from __future__ import annotations

from pathlib import Path

import pytest

from denpex_tui.core import firsterror
from denpex_tui.core.lines.chunk import newlines
from denpex_tui.core.lines.facts import line_facts
from denpex_tui.core.patterns import LineScan
from helpers import line_chunks

FIX = Path(__file__).parent / "fixtures"


def _walk_every_match(chunks: list[bytes]) -> tuple[int, float | None] | None:
    """The rule as written before the scan: every match of the chunk, a line's first one within
    its first 160 bytes, through the door."""
    first = 1
    for data in chunks:
        counted, line, last_s = 0, first, -1
        for m in firsterror._CANDIDATE.finditer(data):
            s = data.rfind(b"\n", 0, m.start()) + 1
            if s == last_s or m.start() - s > firsterror._HEAD:
                continue
            last_s = s
            line += newlines(data, counted, s)
            counted = s
            e = data.find(b"\n", s)
            f = line_facts(data[s:e if e >= 0 else len(data)][:512], None)
            if f.text.startswith("Traceback (most") and f.time is None:
                return line, None
            if f.level in ("error", "critical") and f.epoch is not None:
                return line, f.epoch
        first += newlines(data)
    return None


class _Probe(firsterror.FirstErrorMixin):
    year_hint = None
    first_error = None


def _scan(chunks: list[bytes]):
    p, first = _Probe(), 1
    for data in chunks:
        p.look_first_error(data, first)
        if p.first_error is not None:
            return p.first_error
        first += newlines(data)
    return None


@pytest.mark.parametrize("hs_min", [0, 1 << 40])  # Hyperscan (RE2 where it is not installed), RE2
@pytest.mark.parametrize("size", [600, 1 << 20])
def test_the_first_error_is_the_same_from_the_flagged_lines(monkeypatch, hs_min, size):
    monkeypatch.setattr(LineScan, "hs_min", hs_min)
    found = 0
    for p in sorted(FIX.rglob("*")):
        if not p.is_file() or p.suffix not in (".log", ".txt", ".out", ".err"):
            continue
        data = p.read_bytes()
        if not data or b"\0" in data[:4096]:
            continue
        chunks = line_chunks(data if data.endswith(b"\n") else data + b"\n", size)
        want = _walk_every_match(chunks)
        assert _scan(chunks) == want, p
        found += want is not None
    assert found > 50
