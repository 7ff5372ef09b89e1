"""Scoring Denpex's diagnosis against cases with a ``truth.json`` (the wild corpus of logs users
pasted into public issue threads, and our own real runs). Shared by the accuracy test and
``bench/accuracy.py``.

A case is right on **signature** when the job's root cause (the first attempt's initiating
finding) carries one of the ids the truth accepts, and right on **rank** (scored only where the
truth names a rank) when it names that rank. The line is reported, not scored: a right answer
may point at the traceback header or at the error line.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from denpex_tui.core.scan import scan_paths

ROOT = Path(__file__).resolve().parent / "fixtures"
SETS = {"wild": ROOT / "wild", "runs": ROOT / "runs"}


@dataclass
class CaseScore:
    name: str
    family: str
    formats: list[str]
    accept: list[str]
    truth_rank: int | None
    got_sig: str | None
    got_rank: int | None
    got_line: tuple[str, int] | None
    truth_line: tuple[str, int] | None
    sig_ok: bool
    rank_ok: bool | None
    collateral_ok: bool | None = None  # scored where the truth lists the collateral ranks
    batch: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def line_ok(self) -> bool | None:
        if self.truth_line is None or self.got_line is None:
            return None
        return self.got_line[0] == self.truth_line[0] and self.got_line[1] == self.truth_line[1]


def cases(which: str = "wild") -> list[Path]:
    base = SETS[which]
    if not base.is_dir():
        return []
    return sorted(p for p in base.iterdir() if (p / "truth.json").is_file())


def log_files(case: Path) -> list[str]:
    out = []
    for dirpath, _dirs, files in os.walk(case):
        for f in files:
            if f == "truth.json" or f.endswith(".md"):
                continue
            out.append(os.path.join(dirpath, f))
    return sorted(out)


def batch_of(case: Path, truth: dict) -> str:
    """The collection batch a case belongs to: its truth's ``batch``, else the set it was tuned on
    (wild ``a_``/``b_``: ``tuned``; wild ``h_``: ``held-out``; runs: ``runs-1``)."""
    if truth.get("batch"):
        return str(truth["batch"])
    if case.parent.name == "wild":
        return "held-out" if case.name.startswith("h_") else "tuned"
    return "runs-1"


def logdir_cases() -> list[Path]:
    """Our runs that kept torchrun's ``--log-dir`` tree: scored again on that tree alone (no
    console, no launcher record, no other evidence), as a user with only the log dir would."""
    return [c for c in cases("runs") if (c / "logs").is_dir()]


def score_case(case: Path, only: str | None = None) -> CaseScore:
    """Score one case on all its files, or on the files under its subfolder ``only``."""
    t = json.loads((case / "truth.json").read_text())
    r = scan_paths(log_files(case / only if only else case), include_user=False)
    root = next((i for i in r.incidents if i.initiating is not None), None)
    init = root.initiating if root else None
    accept = list(t.get("accept") or [])
    fe = t.get("first_error") or {}
    truth_line = (fe.get("file"), fe.get("line")) if fe.get("file") else None
    got_line = None
    if init is not None and init.path:
        rel = os.path.relpath(init.path, case)
        got_line = (rel, init.line)
    truth_rank = t.get("initiating_rank")
    sig_ok = (init is None) if not accept else (init is not None and init.signature in accept)
    rank_ok = None if truth_rank is None else (init is not None and init.rank == truth_rank)
    coll_ok = None
    if t.get("collateral_ranks") is not None:
        got_coll = sorted({c.rank for c in root.collateral if c.rank is not None}) if root else []
        coll_ok = got_coll == sorted(t["collateral_ranks"])
    return CaseScore(case.name, t.get("family", "?"), list(t.get("formats") or []), accept, truth_rank,
                     init.signature if init else None, init.rank if init else None, got_line, truth_line,
                     sig_ok, rank_ok, coll_ok, batch_of(case, t))


def table(scores: list[CaseScore], key) -> dict[str, tuple[int, int, int, int]]:
    """group -> (signature right, cases, rank right, cases with a rank)"""
    out: dict[str, list[int]] = {}
    for s in scores:
        for k in key(s):
            row = out.setdefault(k, [0, 0, 0, 0])
            row[0] += s.sig_ok
            row[1] += 1
            if s.rank_ok is not None:
                row[2] += s.rank_ok
                row[3] += 1
    return {k: tuple(v) for k, v in sorted(out.items())}
