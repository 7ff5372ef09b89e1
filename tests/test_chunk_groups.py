"""One pass of the prefilter over a chunk also finds each rank's error lines and the lines that
may be checkpoint saves (Matcher.CHUNK_GROUPS): with Hyperscan the three searches share one
database. Each must give exactly the lines its own search gives, on every fixture log, in big and
small chunks; without Hyperscan the groups are not served and their callers search themselves."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import re2

from denpex_tui.core import firsterror, progress
from denpex_tui.core.catalog import load_catalog
from denpex_tui.core.matcher import CHUNK_GROUPS, Matcher
from denpex_tui.core.patterns import HAVE_HYPERSCAN, LineScan, Prefilter
from helpers import line_chunks

FIX = Path(__file__).parent / "fixtures"


def _logs() -> list[bytes]:
    out = []
    for p in sorted(FIX.rglob("*")):
        if p.is_file() and p.suffix in (".log", ".txt", ".out", ".err"):
            data = p.read_bytes()
            if data and b"\0" not in data[:4096]:
                out.append(data if data.endswith(b"\n") else data + b"\n")
    return out


def _lines_holding(data: bytes, rx) -> list[int]:
    """The starts of the lines where ``rx`` matches, line by line (the rule itself)."""
    out, pos = [], 0
    while pos < len(data):
        nl = data.find(b"\n", pos)
        nl = len(data) if nl < 0 else nl
        if rx.search(data[pos:nl]):
            out.append(pos)
        pos = nl + 1
    return out


_RULES = {name: re2.compile("|".join(p if regex else re.escape(p) for p in pats).encode())
          for name, (pats, regex) in CHUNK_GROUPS.items()}


@pytest.mark.parametrize("engine", [
    pytest.param("hyperscan", marks=pytest.mark.skipif(not HAVE_HYPERSCAN, reason="Hyperscan is x86-64 only")),
    "re2"])
@pytest.mark.parametrize("size", [600, 1 << 20])
def test_each_group_gives_the_lines_of_its_own_search(size, engine, monkeypatch):
    monkeypatch.setenv("DENPEX_PREFILTER", "" if engine == "hyperscan" else "re2")
    m = Matcher(load_catalog(include_user=False))
    pf = m.prefilter
    assert pf.backend == engine and set(pf.groups) == set(CHUNK_GROUPS)
    alone = Prefilter(pf.literals)  # the catalog's literals without the groups
    own = {"errors": LineScan(firsterror.ERROR_LINE_WORDS, regex=True), "saves": LineScan(progress.SAVE_NEEDLES)}
    monkeypatch.setattr(LineScan, "hs_min", 1 << 40)  # their own searches on RE2: another engine
    any_literal = re2.compile("|".join(f"(?i:{re.escape(t)})" if ci else re.escape(t) for t, ci in pf.literals).encode())
    found = dict.fromkeys(CHUNK_GROUPS, 0)
    for data in _logs():
        for chunk in line_chunks(data, size):
            starts, groups = pf.scan(chunk)
            assert starts == alone.line_starts(chunk) == _lines_holding(chunk, any_literal)
            for name in CHUNK_GROUPS:
                want = _lines_holding(chunk, _RULES[name])
                assert groups[name] == want == own[name].line_starts(chunk)
                found[name] += len(want)
    assert found["errors"] > 200 and found["saves"] > 20, found


def test_without_re2_the_groups_are_searched_by_their_callers(monkeypatch):
    import denpex_tui.core.patterns as patterns

    monkeypatch.setenv("DENPEX_PREFILTER", "re2")
    monkeypatch.setattr(patterns, "HAVE_RE2", False)  # Python's re: the groups are not served
    pf = Matcher(load_catalog(include_user=False)).prefilter
    data = (b"[rank0]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank 0] Watchdog caught collective "
            b"operation timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=131072000, NumelOut=131072000, "
            b"Timeout(ms)=600000) ran for 600081 milliseconds before timing out.\n")  # failure-messages.md D1
    starts, groups = pf.scan(data)
    assert pf.backend == "re" and pf.groups == () and groups == {}
    assert starts == [0]


def test_a_glog_error_head_is_an_error_line_and_an_impossible_time_is_not():
    # failure-messages.md D1 (c10's glog head after torchrun's rank label), and glog's own head
    real = [b"[rank0]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank 0] Watchdog caught collective",
            b"E0412 09:05:59.000123  4711 socket.cpp:58] connect() failed",
            b"F1231 23:59:60.999999  1 logging.cc:1] leap second"]
    for line in real:
        assert _RULES["errors"].search(line), line
    for line in (b"E9999 01:02:03 not a date", b"E1205 25:61:00 not a time", b"build E12345 01:02:03"):
        assert not _RULES["errors"].search(line), line
