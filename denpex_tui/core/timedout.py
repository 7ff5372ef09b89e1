"""Every rank timed out: who detected it first, and what to call the incident.

When every rank in the logs timed out (or was told of a timeout), nothing failed before it and no
rank is missing from those that timed out, the logs do not show the rank they waited for. Then
the initiating finding is the timeout itself, with "no rank failed before it" and why the rank
that reports it is not necessarily the cause:

* :func:`reported_timeout`: a report names the rank that *detected* the timeout first (the Flight
  Recorder's ``dump signal ... from rank N``, ``from this local rank``, rankroles' ``reporter``);
* :func:`timed_out_together`: without such a report, the earliest timeout report is the detector,
  at low confidence, and every rank that timed out is collateral (a victim of the wait), never a
  "stalled" rank picked among them.

A rank's own timeout among its reports of the hang is :func:`timeout_report` (the watchdog's "timed
out" line, not its companion progress or teardown lines).
"""

from __future__ import annotations

import re

from .catalog import Catalog
from .model import Finding, Incident, LastLine
from .ranks import one_per_rank as _one_per_rank
from .ranks import rank_entry as _entry
from .rankroles import named
from .words import plural, tally
from .words import ranks as _ranks_of

__all__ = ["reported_timeout", "timed_out_together", "timeout_report", "as_timeout"]

_TIMEOUT_KIND = re.compile(r"timeout|stuck|heartbeat|stalled|section|hang|dump-signal")


def _ts(t) -> float | None:
    return t.timestamp() if t is not None else None


def timeout_report(fs: list[Finding]) -> Finding | None:
    """A rank's own timeout among its reports of one hang: the watchdog's 'timed out' line, not
    its companion progress or teardown lines (failure detected at work N, taking the process
    down), whichever of them carries a time; the file's line order among them."""
    own = [f for f in fs if "timeout" in f.signature]
    return min(own, key=lambda f: (f.path, f.text_line)) if own else None


def reported_timeout(attempt, coll: list[Finding], catalog: Catalog) -> Incident | None:
    """Every rank here timed out or was told of a timeout, and a report names the rank that
    *detected* it first (the Flight Recorder's 'dump signal ... from rank N', or 'from this local
    rank'). That rank is where the timeout was first seen: a detector, not proof of the cause."""
    reps = []
    for f in coll:
        ranks, ex = named(f.text, "reporter", f.rank)
        if ranks:
            reps.append((_ts(f.time) if f.time else float("inf"), f.source_order, f.text_line, ranks[0], ex, f))
    if not reps:
        return None
    reps.sort(key=lambda x: x[:3])
    _, _, _, rank, ex, f = reps[0]
    own = [x for x in coll if x.rank == rank and "timeout" in x.signature]
    src = own[0] if own else f
    sig = catalog.get("dist.collective-timeout")
    init = _entry(src, [src])
    init.rank, init.role = rank, "initiating"
    if not own:
        init.signature = "dist.collective-timeout"
        init.title = sig.title if sig else "Collective timed out"
        init.phase, init.family = (sig.phase, sig.family) if sig else ("any", "dist")
    told = sorted({x.rank for x in coll if x.rank is not None and x.rank != rank})
    by = f"rank {f.rank}'s" if f.rank is not None and f.rank != rank else "its own"
    evidence = [
        f"no rank failed before the timeout; per {by} Flight Recorder dump signal ('{f.text[:160]}'), rank {rank} "
        "detected the collective timeout first",
        "the detecting rank is where the hang was first seen, not necessarily its cause: the rank that never "
        "entered the collective prints no timeout; compare 'last enqueued/completed NCCL work' across ranks, or "
        "read the Flight Recorder dumps (python -m torch.distributed.flight_recorder.fr_trace DUMP_DIR)",
    ]
    if told:
        evidence.append(f"{_ranks_of(told)} {plural(len(told), 'was', 'were')} told of the timeout or timed out "
                        "after it (collateral)")
    collateral = _one_per_rank([_entry(x, [x]) for x in coll if x.rank != rank])
    summary = (f"rank {rank} first to detect: {init.title} - {tally(len(collateral))}; "
               "no rank failed before it")
    return Incident(attempt, init, collateral, [], None, "low", evidence, summary)


def as_timeout(f: Finding, catalog: Catalog) -> Finding:
    """A report of a timeout that is not the timeout line itself (a Flight Recorder dump signal 'due
    to a collective timeout') presented as the collective timeout it reports."""
    if "timeout" in f.signature:
        return f
    sig = catalog.get("dist.collective-timeout")
    f.fields = {**f.fields, "seen_as": f.signature}
    f.signature = "dist.collective-timeout"
    f.title = sig.title if sig else "Collective timed out"
    f.phase, f.family = (sig.phase, sig.family) if sig else ("any", "dist")
    return f


def timed_out_together(attempt, coll: list[Finding], lasts: dict[int, LastLine], catalog: Catalog) -> Incident | None:
    """Every rank here timed out, none is missing or behind, and no report names a detector: the
    earliest timeout report is the initiating finding ("no rank failed before it"), every rank
    that timed out is collateral."""
    waited = [f for f in coll if f.rank is not None and _TIMEOUT_KIND.search(f.signature)]
    if not waited or len({f.rank for f in waited}) < 2:
        return None
    first = min(waited, key=lambda f: (_ts(f.time) if f.time else float("inf"), f.source_order, f.text_line))
    src = timeout_report([x for x in coll if x.rank == first.rank]) or first
    init = as_timeout(_entry(src, [x for x in coll if x.rank == first.rank]), catalog)
    init.role = "initiating"
    ranks = sorted({f.rank for f in waited})
    evidence = [
        f"{_ranks_of(ranks)} all timed out waiting in a collective and no rank failed before: the rank "
        "they waited for is not in these logs, or printed nothing",
        f"rank {first.rank} reported the timeout first; it is a victim of the wait like the others, not the "
        "cause: the rank that never entered the collective prints no timeout (add its log; compare 'last "
        "enqueued/completed NCCL work' across ranks, or read the Flight Recorder dumps)",
    ]
    collateral = _one_per_rank([_entry(x, [y for y in coll if y.rank == x.rank]) for x in coll if x.rank != first.rank])
    collateral.sort(key=lambda f: f.rank if f.rank is not None else 1 << 30)
    summary = (f"rank {first.rank} first to report: {init.title} - {tally(len(collateral))}; no rank failed "
               "before it, the rank they waited for is not in these logs")
    return Incident(attempt, init, collateral, [], None, "low", evidence, summary)
