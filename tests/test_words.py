"""Numbers and plurals in one place (core/words.py), and every headline and summary template
rendered with one and with many (issue 20: "1 ranks", "ranks 0 were", "rank ? initiating",
"per the launcher" twice, "rank 0 failed of the consequence", "Findings (6, ...)" above 4 rows)."""

from __future__ import annotations

import io
import re
from datetime import datetime
from pathlib import Path

import pytest
from helpers import CORPUS, ROOT

from denpex_tui.app.model import JobSummary, WatchState
from denpex_tui.core.model import FailureEntry, Finding, Incident
from denpex_tui.core.scan import scan_paths
from denpex_tui.core.story import job_story
from denpex_tui.core.words import UNRANKED, be, count, plural, rank, ranks, span, tally
from denpex_tui.render.report import make_console, print_scan

RUNS = ROOT / "tests" / "fixtures" / "runs"
WILD = ROOT / "tests" / "fixtures" / "wild"

# What no output may say: a plural noun after 1, a singular after another number, one rank
# called "ranks", a placeholder for a rank, a phrase said twice, the old broken sentence.
_NOUNS = r"(?:rank|source|node|line|save|run|row|finding|process|file|gauge|filesystem|step)"
BAD = [
    (re.compile(rf"(?<![\d.,-])1 {_NOUNS}(?:s|es)\b"), "a plural after 1"),
    (re.compile(rf"(?<![\d.,/-])(?:0|[2-9]|\d{{2,}}|\d{{1,3}}(?:,\d{{3}})+) {_NOUNS}\b(?![-'])"), "a singular after a number"),
    (re.compile(r"\branks \d+\b(?![-,\d/])"), "one rank called 'ranks'"),
    (re.compile(r"\brank \?"), "'rank ?'"),
    (re.compile(r"per the launcher[^\n]*per the launcher"), "'per the launcher' twice"),
    (re.compile(r"failed of the consequence"), "'failed of the consequence'"),
    (re.compile(r"\b0 collateral"), "'0 collateral'"),
]


def problems(text: str) -> list[str]:
    out = []
    for line in text.splitlines():
        if line.startswith(("      ", "    $ ", "    # ")):  # log lines and commands quoted as they are
            continue
        for rx, what in BAD:
            if rx.search(line):
                out.append(f"{what}: {line.strip()[:200]}")
    return out


def test_the_wording_functions_with_one_and_many():
    assert [count(n, "rank") for n in (0, 1, 2, 2000)] == ["0 ranks", "1 rank", "2 ranks", "2,000 ranks"]
    assert count(1, "process") == "1 process" and count(3, "training process") == "3 training processes"
    assert plural(1, "watched path") == "watched path" and plural(5, "watched path") == "watched paths"
    assert (be(1), be(3), be(1, past=True), be(2, past=True)) == ("is", "are", "was", "were")
    assert rank(3) == "rank 3" and rank(None) == UNRANKED and "?" not in UNRANKED
    assert ranks([0]) == "rank 0" and ranks([0, 1, 3]) == "ranks 0-1,3" and ranks([None]) == "no rank"
    assert tally(0) == "no collateral" and tally(1) == "1 collateral" and tally(1999) == "1,999 collateral"
    assert tally(0, 1) == "1 same cause" and tally(2, 1) == "2 collateral, 1 same cause"
    assert span(range(8)) == "0-7" and span([2, 3, 5, 6]) == "2-3,5-6"
    sparse = [r for r in range(2000) if r % 3]  # 1,333 ranks seen so far: never a header of ranges
    assert span(sparse) == "within 1-1999"


def _scan_text(path: Path) -> str:
    res = scan_paths([str(path)])
    buf = io.StringIO()
    print_scan(res, make_console(buf), measure=False)
    return buf.getvalue()


# one and many of each count: 1 collateral (hf_trainer_enospc), 3 (fastfail), 1 same cause
# (shm), a launcher's claim (kill9, deepspeed kill -9), a hang, a skewed clock, restarts, the
# findings table with one and several rows folded, single-process pastes without ranks
CASES = sorted(p for d in (CORPUS, RUNS, WILD) for p in d.iterdir() if p.is_dir() and p.name != "make")


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name)
def test_scan_reports_say_numbers_and_ranks_right(case):
    text = _scan_text(case)
    assert not problems(text), "\n".join(problems(text))


def _f(rank, sig="os.enospc", role="initiating", node=None, t=None, attempt=0):
    return Finding(signature=sig, title="No space left on device (ENOSPC)", role=role, severity="error",
                   phase="checkpoint save", family="os", path=f"/j/{rank}.log", line=1, text_line=1, offset=0,
                   text="OSError: [Errno 28] No space left on device", rank=rank, attempt=attempt, node=node,
                   node_key=node, time=t)


def test_the_launcher_note_with_one_and_many_named_ranks_and_a_skewed_clock():
    t0, t1 = datetime(2026, 12, 1, 9, 19, 3), datetime(2026, 12, 1, 9, 14, 3)
    init = _f(1, node="node-a", t=t0)
    coll = [_f(r, "dist.peer-closed", "collateral", node="node-b", t=t1) for r in (0, 2, 3)]
    inc = Incident(0, init, coll, [], None, "high", [], "rank 1 initiating: x - 3 collateral")
    for named in ([2], [0, 2, 3]):
        entries = [FailureEntry(rank=r, local_rank=None, exitcode=1, pid=None, host=None, time=None, error_file=None,
                                root_cause=True, node_key="node-b", path="/j/console.log", line=1, attempt=0)
                   for r in named]
        note = job_story([inc], entries).launcher_note
        assert not problems(note), note
        assert note.startswith(f"torchrun's Root Cause names {ranks(named)}; Denpex says rank 1 because")
        # node-b's clock is behind: its consequence was logged before the cause; the sentence
        # says the order is the corrected one before it gives the times as logged
        assert note.index("once the nodes' clocks are corrected") < note.index("as logged")


def test_the_watch_header_with_one_and_many():
    st = WatchState()
    st.summary = JobSummary(ranks=[0], nodes=["n1"], sources=1, lines=1)
    assert st.shape_text() == "1 rank (0) · 1 node · attempt 0 · 1 source"
    st.summary = JobSummary(ranks=list(range(2000)), nodes=["a", "b"], sources=4000, lines=9)
    assert st.shape_text() == "2,000 ranks (0-1999) · 2 nodes · attempt 0 · 4,000 sources"
    st.summary = JobSummary(ranks=list(range(0, 2000, 2)), sources=1000, lines=9)
    assert st.shape_text().startswith("1,000 ranks (within 0-1998) · ")
    for text in (st.shape_text(),):
        assert not problems(text)
    # while the history is read, the sources are those found (a 2,000-rank job's header said
    # "159 ranks (0-158) · 117 sources" while its 2,000 files were being read)
    st.summary = JobSummary(ranks=list(range(159)), sources=117, lines=9)
    st.reading(10, 100, sources=2000)
    assert st.shape_text().endswith(" · 2,000 sources")
    st.read_all(100, 100)
    assert st.shape_text().endswith(" · 117 sources")
