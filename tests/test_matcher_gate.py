"""The matcher runs a detector only on lines that hold one of its literals (one RE2 set pass
per line tells which). That gate must never lose a detection: on every real line we have (the
corpus runs, the wild logs, the runs made here, the reference messages), the gated detection is
the one of a matcher that tries every signature and every generic detector on every line."""

from __future__ import annotations

from pathlib import Path

import pytest

from denpex_tui.core.catalog import load_catalog
from denpex_tui.core.lines.facts import line_facts
from denpex_tui.core.matcher import Matcher

ROOT = Path(__file__).resolve().parent
REFERENCE = ROOT.parent.parent / "shared" / "reference" / "failure-messages.md"


class _Everything:
    """A literal set that says every literal is on every line: the ungated matcher."""

    def __init__(self, n: int) -> None:
        self._all = list(range(n))

    def ids(self, text: str) -> list[int]:
        return list(self._all)


def _lines() -> list[str]:
    seen: set[str] = set()
    for sig in load_catalog(include_user=False):
        for ex in sig.examples:
            seen.add(line_facts(ex.line.encode("utf-8", "surrogateescape")).text)
    paths = [p for p in sorted((ROOT / "fixtures").rglob("*")) if p.is_file() and p.suffix in (".log", ".txt", ".out", ".err", "")]
    if REFERENCE.exists():
        paths.append(REFERENCE)
    for p in paths:
        try:
            data = p.read_bytes()
        except OSError:
            continue
        if b"\0" in data[:4096]:
            continue
        for raw in data.decode("utf-8", "replace").splitlines():
            seen.add(line_facts(raw.encode("utf-8", "surrogateescape")).text)
    return sorted(seen)


@pytest.fixture(scope="module")
def matchers() -> tuple[Matcher, Matcher]:
    cat = load_catalog(include_user=False)
    gated, ungated = Matcher(cat), Matcher(cat)
    ungated._which = _Everything(len(ungated._useful))
    return gated, ungated


def test_the_literal_gate_loses_no_detection_on_any_real_line(matchers) -> None:
    gated, ungated = matchers
    lines = _lines()
    assert len(lines) > 5000, len(lines)
    detected = 0
    for text in lines:
        a, b = gated._detect(text), ungated._detect(text)
        got = None if a is None else (a.sig.id, a.fields, a.tier)
        want = None if b is None else (b.sig.id, b.fields, b.tier)
        assert got == want, text
        detected += a is not None
    assert detected > 500, detected
