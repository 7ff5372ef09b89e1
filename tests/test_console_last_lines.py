"""The last timed line of each stream of a console is the same whether the short walk back from a
chunk's end finds it or the numpy pass over the chunk does (issue 18: a walk over 2,000 lines, each
through the door, cost 0.3 s on the last chunk of a 96 MB console whose torchrun failure summary
has `[1]:` labels that are no stream), however the console is cut into chunks."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import line_chunks as _chunks

from denpex_tui.core import streamtimes
from denpex_tui.core.catalog import load_catalog
from denpex_tui.core.matcher import Matcher
from denpex_tui.core.model import SourceInfo
from denpex_tui.core.pipeline import SourceProcessor

CORPUS = Path(__file__).parent / "fixtures" / "corpus"
CONSOLES = sorted(CORPUS.glob("*/console.log"))


def _last(path: Path, parts: list[bytes]) -> dict:
    p = SourceProcessor(SourceInfo(path=str(path), kind="console"), Matcher(load_catalog(include_user=False)))
    off = 0
    for part in parts:
        p.feed(part, off)
        off += len(part)
    return {k: (v.line, v.offset, v.text, v.time) for k, v in p.last_lines.items()}


def test_there_are_consoles():
    assert len(CONSOLES) >= 4


@pytest.mark.parametrize("path", CONSOLES, ids=lambda p: p.parent.name)
@pytest.mark.parametrize("size", [600, 4096, 1 << 20])
def test_the_walk_and_the_numpy_pass_find_the_same_last_lines(path, size, monkeypatch):
    data = path.read_bytes()
    parts = _chunks(data, size)
    numpy_calls = []
    orig = SourceProcessor._last_lines_numpy
    monkeypatch.setattr(SourceProcessor, "_last_lines_numpy", lambda *a: numpy_calls.append(1) or orig(*a))
    default = _last(path, parts)
    assert default  # the consoles' streams have timed lines
    monkeypatch.setattr(streamtimes, "_WALK_CONSOLE", 10 ** 6)  # the walk alone
    monkeypatch.setattr(streamtimes, "_WALK_LABELLED", 10 ** 6)
    numpy_calls.clear()
    walked = _last(path, parts)
    assert not numpy_calls
    monkeypatch.setattr(streamtimes, "_WALK_CONSOLE", 0)  # the jumps to each label's last lines
    monkeypatch.setattr(streamtimes, "_WALK_LABELLED", 0)
    numpy_calls.clear()
    jumped = _last(path, parts)
    monkeypatch.setattr(streamtimes, "_JUMPS", 0)  # the numpy pass alone
    numpy_calls.clear()
    numpy = _last(path, parts)
    assert numpy_calls
    assert default == walked == jumped == numpy == _last(path, [data])


def test_a_rank_quiet_at_a_chunks_end_is_found_without_the_numpy_pass(monkeypatch):
    """The bench job's console: in 8 MB chunks, one of the four ranks is often not among the last
    256 lines; its last line is found by jumping to its label, not by the pass over the chunk."""
    path = next(p for p in CONSOLES if b"[default" in p.read_bytes())
    data = path.read_bytes()
    numpy_calls = []
    orig = SourceProcessor._last_lines_numpy
    monkeypatch.setattr(SourceProcessor, "_last_lines_numpy", lambda *a: numpy_calls.append(1) or orig(*a))
    monkeypatch.setattr(streamtimes, "_WALK_LABELLED", 1)  # every stream but the last one is far
    jumped = _last(path, [data])
    assert not numpy_calls
    monkeypatch.setattr(streamtimes, "_JUMPS", 0)
    assert _last(path, [data]) == jumped
    assert numpy_calls
