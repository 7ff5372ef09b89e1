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

Every incident keeps its **competing hypotheses**: the runner-up candidates with the rule that
ranked them lower. Work is linear in the number of findings (plus one sort).
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Callable

from .catalog import Catalog
from .clocks import ClockCheck, check_clocks
from .firstwarn import WARNING_WINDOW, first_warning
from .hang import agent_terminated, external_stop_incident, hang_incident, launcher_incident
from .job import JobState
from .matcher import tier_of
from .model import Finding, Incident, iso
from .ranks import rank_entry as _entry
from .ranks import rank_ranges
from .words import be, tally
from .words import rank as _rank
from .words import ranks as _ranks

__all__ = ["triage", "rank_ranges", "WARNING_WINDOW", "consequence_of", "EPISODE", "SAME_CAUSE_WINDOW"]

SAME_CAUSE_WINDOW = timedelta(seconds=60)
EPISODE = timedelta(seconds=120)
EPISODE_LINES = 200  # the same episode, in lines, when there are no timestamps
_MAX_HYPOTHESES = 5

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
_BLAMES = re.compile(
    r"Ranks? (?P<ranks>\d{1,7}(?:, ?\d{1,7})*) failed to pass monitoredBarrier"
    r"|[Pp]lease check rank (?P<ranks2>\d{1,7}) logs? for (?:the )?faulty rank"
)


def consequence_of(text: str) -> str | None:
    """The phrase that makes an exception's text a consequence of a failure elsewhere."""
    m = _CONSEQUENCE.search(text)
    return m.group(0) if m else None


def _related(sig_a: str, sig_b: str, catalog: Catalog) -> bool:
    if sig_a == sig_b:
        return True
    a, b = catalog.get(sig_a), catalog.get(sig_b)
    if a is None or b is None:
        return False
    return sig_a in b.refines or sig_b in a.refines or bool(set(a.refines) & set(b.refines))


def _phase_label(phase: str) -> str:
    return "" if phase == "any" else f" ({phase.replace('-', ' ')})"


def _tier(f: Finding, catalog: Catalog) -> int:
    sig = catalog.get(f.signature)
    return tier_of(sig) if sig is not None else 2


def _rkey(f: Finding):
    return f.rank if f.rank is not None else ("?", f.path, f.local_rank)


class _Order:
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


def _effective(f: Finding, catalog: Catalog) -> tuple[str, str | None, list[int]]:
    """(role, why, blamed ranks) of one finding under rule 1."""
    ranks = _blamed_field(f)
    m = None if ranks else _BLAMES.search(f.text)
    if m:
        ranks = [int(x) for x in re.split(r", ?", m.group("ranks") or m.group("ranks2"))]
    if ranks:
        if f.rank not in ranks:
            return "collateral", f"it names {_ranks(ranks)} as the faulty one", ranks
    sig = catalog.get(f.signature)
    if f.role == "initiating" and sig is not None and tier_of(sig) == 2:
        phrase = consequence_of(" ".join([f.text, *f.chained[:2]]))
        if phrase:
            return "collateral", f"its text says it is a consequence ('{phrase}')", []
    return f.role, None, []


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
    order = _Order(clocks)
    by_attempt: dict[int, list[Finding]] = {}
    for f in findings:
        by_attempt.setdefault(f.attempt, []).append(f)
    fe_by_attempt: dict[int, list] = {}
    for fe in fentries:
        fe_by_attempt.setdefault(fe.attempt, []).append(fe)
    lasts_by_attempt: dict[int, dict] = {}
    for (a, r), ll in last_lines.items():
        lasts_by_attempt.setdefault(a, {})[r] = ll
    incidents: list[Incident] = []
    for attempt in sorted(set(by_attempt) | set(ranks_by_attempt) | set(fe_by_attempt)):
        fs = by_attempt.get(attempt, [])
        errs = [f for f in fs if f.severity == "error" and f.role in ("initiating", "collateral")]
        ctx = [f for f in fs if f.severity == "error" and f.role == "context"]
        fes = fe_by_attempt.get(attempt, [])
        if not errs and not ctx and not extra_stalls and not any(fe.exitcode not in (None, 0) for fe in fes):
            continue
        inc = _attempt_incident(
            attempt, errs, ctx, fs, ranks_by_attempt.get(attempt, set()), lasts_by_attempt.get(attempt, {}), fes,
            catalog, extra_stalls or {}, order, job,
        )
        if inc is None:
            continue
        if clocks.notes and inc.initiating is not None:
            inc.evidence.extend(clocks.notes)
        if inc.initiating is not None and read_tail is not None and inc.initiating.signature != "proc.killed":
            inc.first_warning = first_warning(inc.initiating, job, catalog, read_tail)
        incidents.append(inc)
    incidents.sort(key=lambda i: (i.attempt, order.key(i.initiating) if i.initiating else (float("inf"),)))
    return incidents


def _attempt_incident(attempt, errs, ctx, all_fs, ranks_seen, lasts, fentries, catalog, stalls, order: _Order,
                      job: JobState) -> Incident | None:
    evidence: list[str] = []
    hypotheses: list[dict] = []
    roles: dict[int, tuple[str, str | None, list[int]]] = {}
    blamed: dict[int, Finding] = {}
    for f in errs:
        r = _effective(f, catalog)
        roles[id(f)] = r
        for b in r[2]:
            blamed.setdefault(b, f)
    by_rank: dict = {}
    for f in errs:
        by_rank.setdefault(_rkey(f), []).append(f)
    # Rule 2: one representative per rank.
    reps: list[tuple[tuple, Finding, Finding, list[Finding]]] = []  # (order, rep, first, all of the rank)
    for k, lst in by_rank.items():
        lst.sort(key=order.key)
        inits = [f for f in lst if roles[id(f)][0] == "initiating"]
        if not inits:
            continue
        first = inits[0]
        rep = first
        if _tier(first, catalog) == 2:
            # A bare exception is replaced by a more specific finding of the same episode.
            t0 = order.when(first)
            window = []
            for f in inits:
                w = order.when(f)
                if t0 is not None and w is not None:
                    near = w - t0 <= EPISODE.total_seconds()
                else:
                    near = f.path == first.path and abs(f.text_line - first.text_line) <= EPISODE_LINES
                if near:
                    window.append(f)
            rep = min(window, key=lambda f: (_tier(f, catalog), order.key(f)))
        if rep is not first:
            rep = _entry(rep, [rep])
            for k2, v in first.fields.items():
                rep.fields.setdefault(k2, v)
            hypotheses.append(_hyp(first, f"same rank, earlier but less specific than {rep.signature}: explained by it"))
        reps.append((order.key(first), rep, first, lst))
    demoted = [f for f in errs if roles[id(f)][0] == "collateral" and f.role == "initiating"]
    for f in demoted[:2]:
        hypotheses.append(_hyp(f, roles[id(f)][1] or "collateral"))
    if reps:
        reps.sort(key=lambda x: x[0])
        _, init, init_first, _ = reps[0]
        confidence = "high"
        same: list[Finding] = []
        rivals: list[tuple[Finding, Finding]] = []
        t0 = order.when(init_first)
        for _, rep, fst, _ in reps[1:]:
            t1 = order.when(fst)
            close = t0 is None or t1 is None or abs(t1 - t0) <= SAME_CAUSE_WINDOW.total_seconds()
            if close and _related(rep.signature, init.signature, catalog):
                same.append(rep)
            else:
                rivals.append((rep, fst))
        exclude = {_rkey(init)} | {_rkey(s) for s in same}
        collateral = []
        for k, lst in by_rank.items():
            if k in exclude:
                continue
            coll = [f for f in lst if roles[id(f)][0] == "collateral"] or lst
            collateral.append(_entry(coll[0], lst))
        if init.rank is None:
            failed = {fe.rank for fe in fentries if fe.rank is not None and fe.rank >= 0
                      and fe.exitcode not in (None, 0, -15)}
            failed |= {f.rank for f in ctx if f.rank is not None and _exitcode(f) not in (0, -15)}
            failed = sorted(failed)
            if len(failed) == 1:
                init = _entry(init, [init])
                init.rank = failed[0]
                evidence.append(f"the line carries no rank; the launcher's failure report names rank {failed[0]} "
                                "as the one worker that failed")
            else:
                confidence = "medium"
                evidence.append("the initiating line carries no rank, and its file name does not give one")
        if init.time is None:
            confidence = "medium"
            evidence.append("no timestamp near the initiating error: order taken from line order")
        elif init.time_approx:
            evidence.append(
                f"{_rank(init.rank)}'s error has no timestamp of its own; its previous line in that file "
                f"is at {iso(init.time)}"
            )
        if same:
            decided = all(
                s.time is not None and init.time is not None and not s.time_approx and not init.time_approx
                and (order.when(s) or 0) - (order.when(init) or 0) > 1.0
                for s in same
            )
            rs = [init.rank] + [s.rank for s in same]
            if decided:
                evidence.append(f"{_ranks(rs)} failed of the same cause; {_rank(init.rank)} was first by its timestamp")
                confidence = "medium" if confidence == "high" else confidence
            else:
                evidence.append(
                    f"{_ranks(rs)} failed of the same cause ({init.signature}) at about the same time: a node- or "
                    "filesystem-level cause; which rank was first cannot be decided from these logs"
                )
                confidence = "low"
        for rep, fst in rivals[:_MAX_HYPOTHESES]:
            t1 = order.when(fst)
            if t0 is not None and t1 is not None:
                rule = f"failed {t1 - t0:.1f} s later by its timestamp"
                if fst.time_approx or init_first.time_approx:
                    rule += " (approximate: a neighbouring line's time)"
            else:
                rule = "later in line order (no timestamps to compare)"
            hypotheses.append(_hyp(rep, rule))
        if rivals and confidence == "high":
            r, rf = rivals[0]
            t1 = order.when(rf)
            if t0 is None or t1 is None or rf.time_approx or init_first.time_approx or t1 - t0 < 1.0:
                confidence = "medium"
                evidence.append(
                    f"{_rank(r.rank)} also failed ({r.signature}); the order between them rests on approximate times"
                )
        if init.rank in blamed:
            b = blamed[init.rank]
            evidence.append(f"rank {b.rank}'s monitored barrier names rank {init.rank} as the rank that failed to arrive")
        if collateral:
            by_sig: dict[str, list] = {}
            for c in collateral:
                by_sig.setdefault(c.signature, []).append(c.rank)
            for sig, rs in by_sig.items():
                evidence.append(f"{_ranks(rs)}: {sig} (collateral)")
        for d in demoted[:3]:
            evidence.append(f"{_rank(d.rank)}'s {d.exc_type or d.signature} is collateral: {roles[id(d)][1]}")
        _launcher_evidence(init, fentries, evidence, hypotheses)
        collateral.extend(agent_terminated(attempt, ranks_seen, {_rkey(c) for c in collateral} | exclude, all_fs,
                                           fentries, init))
        collateral.sort(key=lambda f: (f.rank if f.rank is not None else 1 << 30))
        summary = (
            f"{_rank(init.rank)} initiating: {init.title}"
            f"{_phase_label(init.phase)} - {tally(len(collateral), len(same))}"
        )
        return Incident(attempt, init, collateral, same, None, confidence, evidence, summary,
                        hypotheses=hypotheses[:_MAX_HYPOTHESES])

    coll = [f for f in errs if f.rank is not None]
    inc = external_stop_incident(attempt, errs, all_fs, ranks_seen, fentries, order.when, evidence, hypotheses)
    if inc is not None:
        return inc
    if blamed:
        inc = _blamed_incident(attempt, blamed, coll, lasts, catalog)
        if inc is not None:
            return inc
    if coll or stalls or errs:
        inc = hang_incident(attempt, coll or errs, ranks_seen, lasts, fentries, catalog, stalls, job, ctx)
        inc.hypotheses = hypotheses + inc.hypotheses
    else:
        inc = launcher_incident(attempt, ctx or errs, fentries, catalog, job)
    if inc is not None and inc.initiating is not None:
        have = {_rkey(c) for c in inc.collateral} | {_rkey(inc.initiating)}
        extra = agent_terminated(attempt, ranks_seen, have, all_fs, fentries, inc.initiating)
        if extra:
            inc.collateral = sorted(inc.collateral + extra, key=lambda f: (f.rank if f.rank is not None else 1 << 30))
            extra_ranks = [f.rank for f in extra]
            inc.evidence.append(f"{_ranks(extra_ranks)} {be(len(set(extra_ranks)), past=True)} terminated by the launcher "
                                "before they printed an error of their own (collateral)")
    return inc


def _exitcode(f: Finding) -> int | None:
    v = f.fields.get("exitcode")
    try:
        return int(v) if v is not None else None
    except (TypeError, ValueError):
        return None


def _blamed_incident(attempt, blamed: dict[int, Finding], coll, lasts, catalog) -> Incident | None:
    """A rank another rank's report names as the faulty one (PyTorch's monitored barrier,
    "please check rank N logs for faulty rank"), when the named rank's own log is not here."""
    blamers = {f.rank for f in blamed.values() if f.rank is not None}
    cands = sorted(blamed, key=lambda r: (r in blamers, not (_ARRIVAL.search(blamed[r].text)
                                                              or blamed[r].signature in _STALL_REPORTS), r))
    r = cands[0]
    b = blamed[r]
    init = _entry(b, [b])
    init.rank, init.local_rank, init.role = r, None, "initiating"
    if _ARRIVAL.search(b.text) or b.signature in _STALL_REPORTS:
        sig = catalog.get("dist.rank-stalled")
        init.signature = "dist.rank-stalled"
        init.title = sig.title if sig else "Rank stalled: its peers timed out waiting for it"
        init.phase, init.family = (sig.phase, sig.family) if sig else ("any", "dist")
        ll = lasts.get(r)
        if ll is not None:  # its own last line, where it stopped
            init.path, init.line, init.text_line, init.offset, init.text = ll.path, ll.line, ll.line, ll.offset, ll.text
            init.time, init.node_key = ll.time, ll.node_key
    else:
        init.title = f"Named as the faulty rank by {_rank(b.rank, 'a peer')}'s {b.exc_type or b.title}"
    init.fields = {**b.fields, "named_by": b.rank}
    collateral = []
    seen = set()
    for f in coll:
        if f.rank == r or f.rank in seen:
            continue
        seen.add(f.rank)
        collateral.append(_entry(f, [f]))
    evidence = [f"{_rank(b.rank, 'a peer')} names rank {r} as the faulty rank: '{b.text[:200]}'; "
                f"rank {r}'s own log is not in these logs (add it to see why it failed)"]
    summary = f"rank {r} initiating: named as the faulty rank by its peer - {tally(len(collateral))}"
    return Incident(attempt, init, collateral, [], None, "medium", evidence, summary)


def _launcher_evidence(init: Finding, fentries, evidence: list[str], hypotheses: list[dict]) -> None:
    root = [fe for fe in fentries if fe.root_cause]
    named = sorted({fe.rank for fe in root if fe.rank != init.rank})
    if named:
        evidence.append(
            f"torchrun's Root Cause names {_ranks(named)}; Denpex says "
            f"{_rank(init.rank)} because its own log shows the first initiating failure (launcher summaries are not "
            "trusted: one per node agent, each names the first exit it saw, often a victim)"
        )
        for fe in root:
            if fe.rank != init.rank:
                hypotheses.append({"signature": "torchelastic.failure-record", "rank": fe.rank, "path": fe.path,
                                   "line": fe.line, "time": iso(fe.time), "text": f"exitcode {fe.exitcode}",
                                   "rule": "per the launcher only (torchrun's Root Cause); the rank logs disagree"})
    sigterm = sorted({fe.rank for fe in fentries if fe.exitcode == -15})
    if sigterm:
        evidence.append(f"the agent sent SIGTERM to {_ranks(sigterm)} after the failure")


def _hyp(f: Finding, rule: str) -> dict:
    return {"signature": f.signature, "rank": f.rank, "path": f.path, "line": f.line, "time": iso(f.time),
            "text": f.text[:300], "rule": rule}


def mark_provisional(incidents: list[Incident]) -> None:
    """Incidents decided before every source's history was read: said *so far*, and never of
    high confidence (what is not read yet can overturn them)."""
    for inc in incidents:
        inc.provisional = True
        if inc.confidence == "high":
            inc.confidence = "medium"
        if not inc.summary.startswith("so far: "):
            inc.summary = "so far: " + inc.summary
