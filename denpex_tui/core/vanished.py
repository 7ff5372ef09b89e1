"""Silent ranks and vanished ranks: what a log dir says when a rank dies without a word.

A rank killed by SIGKILL (the kernel's OOM killer, ``kill -9``, a scheduler) prints nothing; its
peers print only that they lost a peer (``Connection reset by peer``, ``Connection closed by
peer``). With the console, the launcher says who died (``exitcode: -9``) and
:mod:`.hang` takes its word. A log dir alone (torchrun's ``--log-dir``, one file per rank) has no
launcher record, and then the evidence is **where each rank stopped**:

* its last timestamped line (:mod:`.streamtimes`), and
* its last progress counter (a tqdm bar as last drawn, a step line: :mod:`.stopmarks`), which
  says it without any timestamp.

The rule (:func:`vanished_incident`), when every failure is collateral and says that a peer went
away (none timed out waiting), no launcher names a rank, and some ranks seen in the logs printed
no error at all (*silent*): the silent rank that **stopped first** is the suspect, killed or dead
without a word. It stopped first when its counter is behind every other rank's counter of the
same loop, or else when its last timestamped line is more than :data:`TIME_MARGIN` seconds
before every other rank's. Confidence: medium when it is measured so, or when it is the only
silent rank; low when several silent ranks stopped at the same place (the lowest is named and the
others are competing hypotheses). Never high: nothing in a log dir says which signal it was.

The other silent ranks stopped where the ranks that lost the peer stopped: their logs just end
when the job is torn down. :func:`silent_collateral` makes them collateral in every incident.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .model import Finding, Incident, LastLine, StopMark
from .ranks import rank_entry as _entry
from .ranks import rank_ranges
from .words import tally

__all__ = ["vanished_incident", "silent_collateral", "stop_order", "TIME_MARGIN", "StopOrder"]

TIME_MARGIN = 1.0  # seconds: a rank whose last line is this much older than every other's stopped first
_TIMEOUT_KIND = re.compile(r"timeout|stuck|heartbeat|stalled|section|hang|dump-signal|watchdog")
# A report that its peer went away: by its signature, or the text of a bare exception.
_PEER_SIG = re.compile(r"econnreset|epipe|peer-closed|remote-error|socket-error")
_PEER_TEXT = re.compile(r"(?i)connection (?:reset|closed)|closed by peer|broken pipe|remote (?:process|worker|peer)")
_SILENT_SIG = "proc.log-ended"


@dataclass
class StopOrder:
    suspect: int | None
    how: str | None  # "progress" | "time" | "only-silent" | "tie"
    evidence: list[str]
    tied: list[int]


def _time(r: int, lasts: dict[int, LastLine], marks: dict[int, StopMark]) -> float | None:
    ts = [x.time.timestamp() for x in (lasts.get(r), marks.get(r)) if x is not None and x.time is not None]
    return max(ts) if ts else None


def _pos(m: StopMark) -> str:
    return f"{m.step}/{m.total}" if m.total else f"step {m.step}"


def stop_order(silent: list[int], ranks: set[int], lasts: dict[int, LastLine],
               marks: dict[int, StopMark]) -> StopOrder:
    """Which of the ``silent`` ranks stopped first among ``ranks``, and how that is known."""
    behind = []
    for s in silent:
        m = marks.get(s)
        others = [marks[r] for r in ranks if r != s and r in marks and marks[r].progress().comparable(m.progress())] \
            if m is not None else []
        if others and all(o.step > m.step for o in others):
            behind.append((m.step, s, m, others))
    if behind:
        _, s, m, others = min(behind)
        ahead = sorted({r for r in ranks if r != s and r in marks})
        ev = [f"rank {s}'s progress stopped at {_pos(m)} ('{m.text[:120]}'); {_ranks(ahead)} got further "
              f"(to {', '.join(sorted({_pos(o) for o in others}))})"]
        return StopOrder(s, "progress", ev, [])
    times = {r: _time(r, lasts, marks) for r in ranks}
    if all(t is not None for t in times.values()) and len(times) > 1:
        early = []
        for s in silent:
            rest = [t for r, t in times.items() if r != s]
            if times[s] < min(rest) - TIME_MARGIN:
                early.append((times[s], s, min(rest)))
        if early:
            t, s, nxt = min(early)
            later = max(t2 for r, t2 in times.items() if r != s)
            return StopOrder(s, "time", [f"rank {s}'s last line is {nxt - t:.1f} s older than any other rank's; its "
                                         f"peers logged {later - t:.1f} s longer"], [])
    if len(silent) == 1:
        return StopOrder(silent[0], "only-silent", [], [])
    where = {marks[s].step for s in silent if s in marks}
    at = f" (all at {_pos(marks[silent[0]])})" if len(where) == 1 and silent[0] in marks else ""
    return StopOrder(min(silent), "tie", [f"ranks {rank_ranges(silent)} all stopped without an error at the same "
                                          f"place{at}: which of them died cannot be told from these logs"],
                     [s for s in silent if s != min(silent)])


def _ranks(rs) -> str:
    rs = list(rs)
    return f"rank {rs[0]}" if len(rs) == 1 else f"ranks {rank_ranges(rs)}"


def _silent(ranks_seen: set, errs: list[Finding]) -> list[int]:
    loud = {f.rank for f in errs if f.rank is not None}
    return sorted(r for r in ranks_seen if r not in loud)


def _killed(rank: int, attempt: int, catalog, mark: StopMark | None, ll: LastLine | None) -> Finding:
    sig = catalog.get("proc.killed")
    at = mark if mark is not None else ll
    return Finding(
        signature="proc.killed",
        title="Died without a word: its log stops first while its peers lost their connection to it",
        role="initiating", severity="error", phase=sig.phase if sig else "any", family="proc",
        path=at.path if at else "", line=at.line if at else 0, text_line=at.line if at else 0,
        offset=at.offset if at else 0, text=at.text if at else "(no line from this rank)", rank=rank,
        node_key=at.node_key if at else None, attempt=attempt, time=at.time if at else None,
        fields={"per": "logs", **({"stopped_at": _pos(mark)} if mark is not None else {})})


def vanished_incident(a) -> Incident | None:
    """The incident for a rank that vanished (see the module's rule), or None when the rule does
    not apply. ``a`` is :class:`~denpex_tui.core.decide.Attempt`."""
    coll = [f for f in a.errs if f.rank is not None]
    if not coll or any(_TIMEOUT_KIND.search(f.signature) for f in coll):
        return None
    if not any(_PEER_SIG.search(f.signature) or _PEER_TEXT.search(f.text) for f in coll):
        return None
    from .hang import _launcher_claims  # the launcher's word, when there is any, decides in hang.py

    if [c for c in _launcher_claims(a.attempt, a.ctx, a.fentries, a.job) if c[1] is not None]:
        return None
    ranks = set(a.ranks_seen) | {f.rank for f in coll}
    # a silent rank counts only where its own stream shows where it stopped (a progress counter
    # or a timestamped line): a rank merely named in an excerpt is not known to have stopped
    silent = [r for r in _silent(ranks, coll) if r in a.marks or r in a.lasts]
    if not silent:
        return None
    order = stop_order(silent, ranks, a.lasts, a.marks)
    s = order.suspect
    init = _killed(s, a.attempt, a.catalog, a.marks.get(s), a.lasts.get(s))
    lost = sorted({f.rank for f in coll})
    sigs = sorted({f.signature for f in coll})
    evidence = list(order.evidence)
    evidence.append(
        f"{_ranks(lost)} then lost their connection to a peer ({', '.join(sigs)}) and none timed out "
        f"waiting: a peer process died. Rank {s} printed no error at all: a process killed by SIGKILL (the OOM "
        "killer, kill -9, a scheduler) or one that crashed without a word leaves exactly this")
    evidence.append("these logs hold no launcher record and no kernel log: the console (torchrun's failure "
                    "summary) or the node's kernel log (dmesg) would say which signal ended it")
    confidence = "low" if order.how == "tie" else "medium"
    hyps = [{"signature": "proc.killed", "rank": r, "path": "", "line": 0, "time": None, "text": "",
             "rule": "also silent, stopped at the same place"} for r in order.tied[:3]]
    hyps.append({"signature": coll[0].signature, "rank": coll[0].rank, "path": coll[0].path, "line": coll[0].line,
                 "time": None, "text": coll[0].text[:300],
                 "rule": "a consequence: it lost its connection to a peer"})
    by: dict = {}
    for f in coll:
        by.setdefault(f.rank, []).append(f)
    collateral = [_entry(lst[0], lst) for lst in by.values()]
    collateral += silent_collateral(a, init, {f.rank for f in collateral} | {s})
    others = [r for r in silent if r != s and r not in order.tied]
    if others:
        evidence.append(f"{_ranks(others)} stopped where the ranks that lost the peer stopped: "
                        f"{'their logs just end' if len(others) > 1 else 'its log just ends'} when the job was torn "
                        "down (collateral)")
    collateral.sort(key=lambda f: f.rank if f.rank is not None else 1 << 30)
    how = {"progress": "its progress stopped first", "time": "its log stopped first",
           "only-silent": "the only rank that did not report losing a peer",
           "tie": "one of the silent ranks"}[order.how or "tie"]
    summary = f"rank {s} initiating: died without a word ({how}) - {tally(len(collateral))}"
    return Incident(a.attempt, init, collateral, [], None, confidence, evidence, summary, hypotheses=hyps)


def silent_collateral(a, init: Finding | None, have: set) -> list[Finding]:
    """Ranks seen in this attempt's logs with no error of their own and not already placed: their
    logs just end (stopped with the job). Collateral, each with where it stopped."""
    if init is None:
        return []
    out = []
    for r in sorted(x for x in a.ranks_seen if isinstance(x, int)):
        if r == init.rank or r in have:
            continue
        at = a.marks.get(r) or a.lasts.get(r)
        out.append(Finding(
            signature=_SILENT_SIG, title="No error of its own: its log just ends (stopped with the job)",
            role="collateral", severity="warning", phase="shutdown", family="proc",
            path=at.path if at else "", line=at.line if at else 0, text_line=at.line if at else 0,
            offset=at.offset if at else 0, text=at.text if at else "(no line from this rank)", rank=r,
            node_key=at.node_key if at else None, attempt=a.attempt, time=at.time if at else None,
            fields={"per": "logs"}))
    return out
