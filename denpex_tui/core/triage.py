"""Triage: per attempt, which rank failed first, what is collateral, how sure we are.

The decision rule, in the order it is applied (each step has tests on real logs):

1. **Role of a finding.** A signature's catalog role, except that a bare exception (no more
   specific detector knew it) whose text says it is a *consequence* — a peer reset or closed the
   connection, a broken pipe, a timeout, an aborted communicator, a framework shutting down
   because another process failed — is collateral; one that names another rank as the faulty
   one (PyTorch's monitored barrier) points there.
2. **One representative per rank.** Among a rank's initiating findings of one episode (the
   first one and what follows within :data:`EPISODE` on that rank), a specific signature beats
   an errno/fatal-signal one, which beats a bare exception; the rank's place in time is its
   first initiating finding.
3. **Order across ranks.** By time; a line without its own time takes the time of the line
   before it in the same file (marked approximate); without any timestamps, line order inside
   one file. Across nodes whose clocks disagree (:mod:`denpex_tui.core.clocks`) the times are
   corrected and the evidence says the clocks were not trusted; collateral roles never win
   over an initiating one, whatever the clocks say.
4. **Same cause.** Ranks failing of related signatures within :data:`SAME_CAUSE_WINDOW` are one
   node- or filesystem-level cause (``same_cause``); the confidence says when their order could
   not be decided.
5. **Hangs** (every failure collateral): the rank that stopped, or the rank the launcher says was
   killed by a signal (:mod:`denpex_tui.core.hang`).
6. **The launcher as the last resort**, only when no rank's own output explains the failure:
   "per the launcher", low confidence, with what the exit code means.
7. Ranks the agent terminated without an error of their own are collateral.
8. **Flight Recorder dumps and NCCL RAS reports**, when there are any, on the last attempt: the rank
   they show missing, stuck or mismatched (:mod:`denpex_tui.core.frtriage`).

The steps are one function each, in :mod:`denpex_tui.core.decide` (rule 1 and the shared
measures in :mod:`denpex_tui.core.roles`); this module applies them per attempt and adds what
spans attempts (clock notes, GPU Xid meanings, the first warning, the dumps' evidence).

Every incident keeps its **competing hypotheses**: the runner-up candidates with the rule that
ranked them lower. Work is linear in the number of findings (plus one sort).
"""

from __future__ import annotations

from typing import Callable

from .catalog import Catalog
from .clocks import check_clocks
from .decide import Attempt, attempt_incident
from .firstwarn import WARNING_WINDOW, first_warning
from .hang import apply_dump_evidence
from .job import JobState
from .model import Finding, Incident
from .ranks import rank_ranges
from .roles import EPISODE, SAME_CAUSE_WINDOW, Order, consequence_of
from .xid import xid_evidence

__all__ = ["triage", "mark_provisional", "rank_ranges", "WARNING_WINDOW", "consequence_of", "EPISODE",
           "SAME_CAUSE_WINDOW"]


def triage(
    job: JobState,
    catalog: Catalog,
    *,
    read_tail: Callable[[str, int | None, int], bytes | None] | None = None,
    extra_stalls: dict[int, float] | None = None,
) -> list[Incident]:
    """Incidents in attempt order. ``read_tail(path, end_offset, max_bytes)`` reads the bytes
    before ``end_offset`` (or the file's end) for the first-warning search; ``extra_stalls``
    maps ranks the live engine saw go silent to their silence in seconds."""
    findings = job.findings()
    ranks_by_attempt = job.ranks_by_attempt()
    last_lines = job.last_lines()
    fentries = job.failure_entries()
    clocks = check_clocks(job.node_times(), job.node_names())
    order = Order(clocks)
    by_attempt: dict[int, list[Finding]] = {}
    for f in findings:
        by_attempt.setdefault(f.attempt, []).append(f)
    fe_by_attempt: dict[int, list] = {}
    for fe in fentries:
        fe_by_attempt.setdefault(fe.attempt, []).append(fe)
    lasts_by_attempt: dict[int, dict] = {}
    for (a, r), ll in last_lines.items():
        lasts_by_attempt.setdefault(a, {})[r] = ll
    marks_by_attempt: dict[int, dict] = {}
    for (a, r), m in job.stop_marks().items():
        marks_by_attempt.setdefault(a, {})[r] = m
    incidents: list[Incident] = []
    for attempt in sorted(set(by_attempt) | set(ranks_by_attempt) | set(fe_by_attempt)):
        fs = by_attempt.get(attempt, [])
        errs = [f for f in fs if f.severity == "error" and f.role in ("initiating", "collateral")]
        ctx = [f for f in fs if f.severity == "error" and f.role == "context"]
        fes = fe_by_attempt.get(attempt, [])
        if not errs and not ctx and not extra_stalls and not any(fe.exitcode not in (None, 0) for fe in fes):
            continue
        inc = attempt_incident(Attempt(attempt, errs, ctx, fs, ranks_by_attempt.get(attempt, set()),
                                       lasts_by_attempt.get(attempt, {}), fes, catalog, extra_stalls or {}, order,
                                       job, marks=marks_by_attempt.get(attempt, {})))
        if inc is None:
            continue
        if clocks.notes and inc.initiating is not None:
            inc.evidence.extend(clocks.notes)
        xe = xid_evidence(inc.initiating.fields) if inc.initiating is not None else None
        if xe:
            inc.evidence.append(xe)
        if inc.initiating is not None and read_tail is not None and inc.initiating.signature != "proc.killed":
            inc.first_warning = first_warning(inc.initiating, job, catalog, read_tail)
        incidents.append(inc)
    incidents = _with_dump_evidence(incidents, job, catalog, lasts_by_attempt, ranks_by_attempt)
    incidents.sort(key=lambda i: (i.attempt, order.key(i.initiating) if i.initiating else (float("inf"),)))
    return incidents


def _with_dump_evidence(incidents: list[Incident], job: JobState, catalog: Catalog, lasts_by_attempt: dict,
                        ranks_by_attempt: dict) -> list[Incident]:
    """Step 8: the job's Flight Recorder dumps and NCCL RAS reports (core/frtriage.py) on its last
    attempt (a dump says nothing of the attempt it was written in; torch overwrites it per rank)."""
    fr = job.flight_recorder()
    ras = job.ras_reports()
    if fr is None and not ras:
        return incidents
    last = max([*ranks_by_attempt, *(i.attempt for i in incidents)], default=0)
    cur = next((i for i in incidents if i.attempt == last), None)
    new = apply_dump_evidence(cur, last, fr, ras, catalog, lasts_by_attempt.get(last, {}))
    if new is None:
        return incidents
    return [i for i in incidents if i is not cur] + [new]


def mark_provisional(incidents: list[Incident]) -> None:
    """Incidents decided before every source's history was read: said *so far*, and never of
    high confidence (what is not read yet can overturn them); what is missing is missing from
    what was read, not from the logs."""
    for inc in incidents:
        inc.provisional = True
        if inc.confidence == "high":
            inc.confidence = "medium"
        inc.summary = inc.summary.replace(_ABSENT, _ABSENT_SO_FAR)
        inc.evidence = [e.replace(_ABSENT, _ABSENT_SO_FAR) for e in inc.evidence]
        if not inc.summary.startswith("so far: "):
            inc.summary = "so far: " + inc.summary


_ABSENT, _ABSENT_SO_FAR = "not in these logs", "not in what is read so far"
