"""Rule 1 of the triage (what role a finding plays, what it says of other ranks) and the
shared measures of the decision: a finding's comparable time, its tier, its rank key.
"""

from __future__ import annotations

import re
from datetime import timedelta

from .catalog import Catalog
from .clocks import ClockCheck
from .matcher import tier_of
from .model import Finding, iso
from .ranks import rank_ranges
from .rankroles import named

__all__ = ["Order", "SAME_CAUSE_WINDOW", "EPISODE", "EPISODE_LINES", "MAX_HYPOTHESES", "consequence_of",
           "effective_role", "explained_by_report", "names_a_stall", "related", "tier", "rkey", "hyp",
           "phase_label"]

SAME_CAUSE_WINDOW = timedelta(seconds=60)
EPISODE = timedelta(seconds=120)
EPISODE_LINES = 200  # the same episode, in lines, when there are no timestamps
MAX_HYPOTHESES = 5

_CONSEQUENCE = re.compile(
    r"(?i)connection (?:reset|closed|refused)(?: by (?:peer|remote))?|broken pipe|\btimed? ?out\b|timeout"
    r"|communicators? (?:was |were |has been |have been )?abort|\babort(?:ed|ing) (?:the )?(?:nccl )?communicator"
    r"|because (?:another|a remote|some other|the other) (?:process|rank|worker|peer)|remote (?:worker|process|peer) "
    r"(?:crash|exit|died|fail)|peer (?:closed|reset|died|exited)|socket (?:closed|timeout)|shutting down because"
    r"|\bterminated? by (?:the )?(?:agent|launcher)|caused by an exception on (?:one of the|another) ranks?"
    r"|\bgot signal: \d{1,2}\b"
)
_ARRIVAL = re.compile(r"failed to pass monitoredBarrier")
_STALL_REPORTS = {"horovod.stall"}  # reports that name the ranks that never arrived


def names_a_stall(f: Finding) -> bool:
    """The report says the named rank never arrived (a barrier, a store key never written)."""
    return bool(_ARRIVAL.search(f.text) or f.signature in _STALL_REPORTS or named(f.text, "missing")[0])


def consequence_of(text: str) -> str | None:
    """The phrase that makes an exception's text a consequence of a failure elsewhere."""
    m = _CONSEQUENCE.search(text)
    return m.group(0) if m else None


def related(sig_a: str, sig_b: str, catalog: Catalog) -> bool:
    if sig_a == sig_b:
        return True
    a, b = catalog.get(sig_a), catalog.get(sig_b)
    if a is None or b is None:
        return False
    return sig_a in b.refines or sig_b in a.refines or bool(set(a.refines) & set(b.refines))


def phase_label(phase: str) -> str:
    return "" if phase == "any" else f" ({phase.replace('-', ' ')})"


def tier(f: Finding, catalog: Catalog) -> int:
    sig = catalog.get(f.signature)
    return tier_of(sig) if sig is not None else 2


def rkey(f: Finding):
    return f.rank if f.rank is not None else ("?", f.path, f.local_rank)


class Order:
    """Comparable time of a finding: clock-corrected timestamp, else line order."""

    def __init__(self, clocks: ClockCheck):
        self.clocks = clocks

    def when(self, f: Finding) -> float | None:
        if f.time is None:
            return None
        return self.clocks.adjust(f.node_key, f.time.timestamp())

    def key(self, f: Finding) -> tuple:
        w = self.when(f)
        return (w if w is not None else float("inf"), f.source_order, f.text_line)


def _blamed_field(f: Finding) -> list[int]:
    """The rank(s) a detector read as the faulty one (``blamed_rank``/``blamed_ranks``)."""
    v = f.fields.get("blamed_ranks") or f.fields.get("blamed_rank")
    if v is None:
        return []
    out = []
    for x in re.split(r"[, ]+", str(v)):
        if x.isdigit() and len(x) <= 7:
            out.append(int(x))
    return out


def effective_role(f: Finding, catalog: Catalog) -> tuple[str, str | None, list[int]]:
    """(role, why, blamed ranks) of one finding under rule 1."""
    ranks = _blamed_field(f) or list(named(f.text, "faulty")[0]) or list(named(f.text, "missing")[0])
    if ranks:
        if f.rank not in ranks:
            return "collateral", f"it names rank{'s' if len(ranks) > 1 else ''} {rank_ranges(ranks)} as the faulty one", ranks
    sig = catalog.get(f.signature)
    if f.role == "initiating" and sig is not None and tier_of(sig) == 2:
        phrase = consequence_of(" ".join([f.text, *f.chained[:2]]))
        if phrase:
            return "collateral", f"its text says it is a consequence ('{phrase}')", []
    return f.role, None, []


def explained_by_report(errs: list[Finding], roles: dict, order: Order) -> None:
    """Rule 1b: a rank whose report names *other* ranks as the faulty ones (DCP's
    CheckpointException, a monitored barrier) printed the failure of those ranks, not its own:
    every initiating finding of that rank in the same episode (after the report, within
    :data:`EPISODE`, or :data:`EPISODE_LINES` in the same file) is part of that report."""
    reports = [f for f in errs if roles[id(f)][2] and f.rank is not None and f.rank not in roles[id(f)][2]]
    for rep in reports:
        t0 = order.when(rep)
        names = rank_ranges(roles[id(rep)][2])
        for g in errs:
            if g is rep or g.rank != rep.rank or roles[id(g)][0] != "initiating":
                continue
            w = order.when(g)
            if t0 is not None and w is not None:
                near = 0 <= w - t0 <= EPISODE.total_seconds()
            else:
                near = g.path == rep.path and 0 <= g.text_line - rep.text_line <= EPISODE_LINES
            if near:
                roles[id(g)] = ("collateral", f"it is part of rank {rep.rank}'s report naming rank {names} as the one "
                                f"that failed ({rep.signature})", roles[id(rep)][2])




def hyp(f: Finding, rule: str) -> dict:
    return {"signature": f.signature, "rank": f.rank, "path": f.path, "line": f.line, "time": iso(f.time),
            "text": f.text[:300], "rule": rule}


