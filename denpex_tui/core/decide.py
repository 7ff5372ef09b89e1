"""One attempt's incident, decided by the numbered steps of the triage rule (docs/diagnosis.md,
section 3), each a function here, applied in that order to one :class:`Attempt`:

1. :func:`step1_roles` — each finding's role, and the ranks its text names (:mod:`.roles`);
2. :func:`step2_representatives` — one representative per rank (a specific signature over a
   bare exception of the same episode);
3. :func:`step3_first` — the earliest representative across ranks (clock-corrected), a rankless
   one given its rank where its file or the launcher tell it (rule 8);
4. :func:`step4_same_cause` — ranks failing of related signatures together: one cause;
5. and 6. :func:`step5_all_collateral` — when every failure is collateral: an external stop, a
   rank another names as faulty, a rank that vanished without a word while its peers lost it
   (:mod:`.vanished`), a hang, the launcher as the last resort (:mod:`.hang`);
7. :func:`step7_terminated` — ranks the agent terminated before an error of their own, and
   ranks whose logs just end with no error of their own (:func:`~.vanished.silent_collateral`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .catalog import Catalog
from .hang import EXTERNAL_STOPS, agent_terminated, external_stop_incident, hang_incident, launcher_incident
from .job import JobState
from .model import FailureEntry, Finding, Incident, LastLine, StopMark, iso
from .ranks import rank_entry as _entry
from .words import be, tally
from .words import rank as _rank
from .words import ranks as _ranks
from .roles import (EPISODE, EPISODE_LINES, MAX_HYPOTHESES, SAME_CAUSE_WINDOW, Order, effective_role,
                    explained_by_report, hyp, names_a_stall, phase_label, related, rkey, tier)
from .vanished import silent_collateral, vanished_incident
from .victims import slow_cause
from .shape import alike_evidence, odd_rank
from .leakhint import leak_question
from .where import refine as where_refine

__all__ = ["Attempt", "attempt_incident"]


@dataclass
class Attempt:
    """What one attempt's decision reads, and what it accumulates."""

    attempt: int
    errs: list[Finding]  # findings of error severity, initiating or collateral
    ctx: list[Finding]  # context findings of error severity (launcher records)
    all_fs: list[Finding]
    ranks_seen: set
    lasts: dict[int, LastLine]
    fentries: list[FailureEntry]
    catalog: Catalog
    stalls: dict
    order: Order
    job: JobState
    evidence: list[str] = field(default_factory=list)
    hypotheses: list[dict] = field(default_factory=list)
    roles: dict[int, tuple[str, str | None, list[int]]] = field(default_factory=dict)
    blamed: dict[int, Finding] = field(default_factory=dict)
    by_rank: dict[Any, list[Finding]] = field(default_factory=dict)
    marks: dict[int, StopMark] = field(default_factory=dict)  # where each rank last showed progress


def attempt_incident(a: Attempt) -> Incident | None:
    step1_roles(a)
    reps = step2_representatives(a)
    demoted = [f for f in a.errs if a.roles[id(f)][0] == "collateral" and f.role == "initiating"]
    for f in demoted[:2]:
        a.hypotheses.append(hyp(f, a.roles[id(f)][1] or "collateral"))
    if reps:
        return _initiating_incident(a, reps, demoted)
    inc = step5_all_collateral(a)
    if inc is not None and inc.initiating is not None:
        have = {rkey(c) for c in inc.collateral} | {rkey(inc.initiating)}
        extra = step7_terminated(a, inc.initiating, have)
        if extra:
            inc.collateral = _by_rank(inc.collateral + extra)
            extra_ranks = [f.rank for f in extra]
            inc.evidence.append(f"{_ranks(extra_ranks)} {be(len(set(extra_ranks)), past=True)} terminated by the launcher "
                                "before they printed an error of their own (collateral)")
        quiet = silent_collateral(a, inc.initiating, have | {rkey(f) for f in extra})
        if quiet:
            inc.collateral = _by_rank(inc.collateral + quiet)
    return inc


# -- 1 ------------------------------------------------------------------------------------------


def step1_roles(a: Attempt) -> None:
    for f in a.errs:
        r = effective_role(f, a.catalog)
        a.roles[id(f)] = r
        for b in r[2]:
            a.blamed.setdefault(b, f)
    explained_by_report(a.errs, a.roles, a.order)
    step1_shape(a)
    for f in a.errs:
        a.by_rank.setdefault(rkey(f), []).append(f)


def step1_shape(a: Attempt) -> None:
    """What every rank's report says together (:mod:`.shape`): the rank whose collective
    fingerprint differs from the majority's is the one at fault; the others' reports are
    collateral."""
    odd = odd_rank([f for f in a.errs if f.rank is not None])
    if odd is None:
        return
    r, why = odd
    for f in a.errs:
        if f.rank is not None and f.rank != r and a.roles[id(f)][0] == "initiating":
            a.roles[id(f)] = ("collateral", f"its report pairs it with rank {r}, whose collective differs from the "
                              "majority's", [r])
    a.evidence.append(why)


# -- 2 ------------------------------------------------------------------------------------------


def step2_representatives(a: Attempt) -> list[tuple[tuple, Finding, Finding, list[Finding]]]:
    """Per rank: (its place in time, its representative, its first initiating finding, all of it)."""
    reps = []
    for lst in a.by_rank.values():
        lst.sort(key=a.order.key)
        inits = [f for f in lst if a.roles[id(f)][0] == "initiating"]
        if not inits:
            continue
        first = inits[0]
        rep = first
        if tier(first, a.catalog) == 2:
            # A bare exception is replaced by a more specific finding of the same episode.
            t0 = a.order.when(first)
            window = []
            for f in inits:
                w = a.order.when(f)
                if t0 is not None and w is not None:
                    near = w - t0 <= EPISODE.total_seconds()
                else:
                    near = f.path == first.path and abs(f.text_line - first.text_line) <= EPISODE_LINES
                if near:
                    window.append(f)
            rep = min(window, key=lambda f: (tier(f, a.catalog), a.order.key(f)))
        if rep is not first:
            rep = _entry(rep, [rep])
            for k, v in first.fields.items():
                rep.fields.setdefault(k, v)
            a.hypotheses.append(hyp(first, f"same rank, earlier but less specific than {rep.signature}: explained by it"))
        reps.append((a.order.key(first), rep, first, lst))
    reps.sort(key=lambda x: x[0])
    return reps


# -- 3 ------------------------------------------------------------------------------------------


def step3_first(a: Attempt, init: Finding) -> tuple[Finding, str]:
    """The earliest rank's representative, with its rank where the file or the launcher gives
    it, and the confidence its rank and time allow."""
    confidence = "high"
    if init.rank is None and init.signature in EXTERNAL_STOPS:
        a.evidence.append("the job was stopped from outside (the scheduler, a person): no rank of it did this, and "
                          "no rank's failure comes before it")
    elif init.rank is None:
        failed = {fe.rank for fe in a.fentries if fe.rank is not None and fe.rank >= 0
                  and fe.exitcode not in (None, 0, -15)}
        failed |= {f.rank for f in a.ctx if f.rank is not None and _exitcode(f) not in (0, -15)}
        proc = _same_process_rank(init, a.all_fs)
        if proc is not None:
            init = _entry(init, [init])
            init.rank = proc[0]
            a.evidence.append(f"the line carries no rank; rank {proc[0]}'s next report in the same file repeats its "
                              f"error ('{proc[1][:120]}'): the same process")
        elif len(failed) == 1:
            init = _entry(init, [init])
            init.rank = next(iter(failed))
            a.evidence.append(f"the line carries no rank; the launcher's failure report names rank {init.rank} "
                              "as the one worker that failed")
        elif len(a.blamed) == 1:
            # a wrapper's report names the one worker that failed (Ray Train's 'Worker 0 has failed.',
            # DCP's ranks:dict_keys([2])); the rankless failure is that worker's
            init = _entry(init, [init])
            init.rank = next(iter(a.blamed))
            b = a.blamed[init.rank]
            a.evidence.append(f"the line carries no rank; '{b.text[:120]}' names rank {init.rank} as the one that "
                              "failed (or is missing): the rankless failure is taken as that rank's")
        else:
            confidence = "medium"
            a.evidence.append("the initiating line carries no rank, and its file name does not give one")
    if init.time is None:
        confidence = "medium"
        a.evidence.append("no timestamp near the initiating error: order taken from line order")
    elif init.time_approx:
        a.evidence.append(f"rank {init.rank}'s error has no timestamp of its own; its previous line in that file "
                          f"is at {iso(init.time)}")
    return init, confidence


_ERR_MSG = re.compile(r"(?:\w+(?:Error|Exception)|what\(\)):\s*(?P<msg>.{12,})")


def _same_process_rank(init: Finding, all_fs: list[Finding]) -> tuple[int, str] | None:
    """Rule 8: a rankless error whose message a ranked report of the same file repeats just after
    it (a CUDA error, then that process's NCCL watchdog '[Rank 1] ... terminated with exception:
    <the same message>') is that rank's: one rank only, within :data:`EPISODE_LINES`."""
    m = _ERR_MSG.search(init.text)
    if not m:
        return None
    msg = m.group("msg").strip()
    ranks = {f.rank for f in all_fs if f.rank is not None and f.path == init.path
             and 0 < f.text_line - init.text_line <= EPISODE_LINES and msg in f.text}
    return (ranks.pop(), msg) if len(ranks) == 1 else None


def _exitcode(f: Finding) -> int | None:
    v = f.fields.get("exitcode")
    try:
        return int(v) if v is not None else None
    except (TypeError, ValueError):
        return None


# -- 4 ------------------------------------------------------------------------------------------


def step4_same_cause(a: Attempt, init: Finding, init_first: Finding, reps, confidence: str
                     ) -> tuple[list[Finding], list[tuple[Finding, Finding]], str]:
    """(same cause, rivals, confidence): other ranks failing of a related signature within
    :data:`SAME_CAUSE_WINDOW` are one node- or filesystem-level cause."""
    same, rivals = [], []
    t0 = a.order.when(init_first)
    for _, rep, fst, _ in reps[1:]:
        t1 = a.order.when(fst)
        close = t0 is None or t1 is None or abs(t1 - t0) <= SAME_CAUSE_WINDOW.total_seconds()
        if close and related(rep.signature, init.signature, a.catalog):
            same.append(rep)
        else:
            rivals.append((rep, fst))
    if same:
        decided = all(
            s.time is not None and init.time is not None and not s.time_approx and not init.time_approx
            and (a.order.when(s) or 0) - (a.order.when(init) or 0) > 1.0
            for s in same
        )
        ranks = _ranks([init.rank] + [s.rank for s in same])
        if decided:
            a.evidence.append(f"{ranks} failed of the same cause; rank {init.rank} was first by its timestamp")
            confidence = "medium" if confidence == "high" else confidence
        else:
            a.evidence.append(f"{ranks} failed of the same cause ({init.signature}) at about the same time: a "
                              "node- or filesystem-level cause; which rank was first cannot be decided from these logs")
            confidence = "low"
    for rep, fst in rivals[:MAX_HYPOTHESES]:
        t1 = a.order.when(fst)
        if t0 is not None and t1 is not None:
            rule = f"failed {t1 - t0:.1f} s later by its timestamp"
            if fst.time_approx or init_first.time_approx:
                rule += " (approximate: a neighbouring line's time)"
        else:
            rule = "later in line order (no timestamps to compare)"
        a.hypotheses.append(hyp(rep, rule))
    if rivals and confidence == "high":
        r, rf = rivals[0]
        t1 = a.order.when(rf)
        if t0 is None or t1 is None or rf.time_approx or init_first.time_approx or t1 - t0 < 1.0:
            confidence = "medium"
            a.evidence.append(f"rank {r.rank} also failed ({r.signature}); the order between them rests on "
                              "approximate times")
    return same, rivals, confidence


def step3_where(a: Attempt, init: Finding) -> Finding:
    """Say what and where (:mod:`.where`): the frames around the initiating error give its phase
    (an EMFILE in a DataLoader worker is data loading) and its place (an ENOSPC on /dev/shm, a
    bus error inside NCCL's shared memory)."""
    # the same error reported again by the same rank in this episode (a print, then its
    # traceback): its frames say where too
    hits = list(init.fields.get("where") or [])
    t0 = a.order.when(init)
    for f in a.by_rank.get(rkey(init), []):
        w = a.order.when(f)
        near = (abs(w - t0) <= EPISODE.total_seconds() if t0 is not None and w is not None
                else f.path == init.path and abs(f.text_line - init.text_line) <= EPISODE_LINES)
        if f is not init and f.signature == init.signature and near:
            hits += [h for h in f.fields.get("where") or [] if h not in hits]
    probe = init
    if hits != list(init.fields.get("where") or []):
        probe = _entry(init, [init])
        probe.fields = {**init.fields, "where": hits}
    sig_id, phase, why = where_refine(probe, a.catalog)
    if sig_id is None and phase is None:
        return init
    init = _entry(probe, [init])
    if sig_id is not None:
        sig = a.catalog.get(sig_id)
        init.fields = {**init.fields, "seen_as": init.signature}
        init.signature, init.title, init.family, init.phase = sig.id, sig.title, sig.family, sig.phase
    if phase is not None:
        init.phase = phase
    if why:
        a.evidence.append(why)
    return init


def step3_measure(a: Attempt, init: Finding) -> None:
    """An ENOSPC in a checkpoint save: which measurement tells a full disk from deleted checkpoints
    still held open (the FastFileWriter fd leak), with the commands (:mod:`.leakhint`)."""
    from .fixes import incident_values

    vals = incident_values(init, a.job)
    ckpt = str(vals.get("ckpt_dir") or "")
    q = leak_question(init, a.job.versions(), vals.get("dir") or (ckpt if "/" in ckpt and ckpt[0] not in "[(" else None))
    if q is not None:
        a.evidence.append(q[0])
        a.hypotheses.append(q[1])


def _initiating_incident(a: Attempt, reps, demoted: list[Finding]) -> Incident:
    _, rep, init_first, _ = reps[0]
    init, confidence = step3_first(a, rep)
    init = step3_where(a, init)
    alike = alike_evidence(init) if init.signature not in EXTERNAL_STOPS else None
    if alike:
        a.evidence.append(alike)
    step3_measure(a, init)
    same, _rivals, confidence = step4_same_cause(a, init, init_first, reps, confidence)
    exclude = {rkey(rep), rkey(init)} | {rkey(s) for s in same}  # the rank as found, and as given
    collateral = []
    for k, lst in a.by_rank.items():
        if k in exclude:
            continue
        coll = [f for f in lst if a.roles[id(f)][0] == "collateral"] or lst
        collateral.append(_entry(coll[0], lst))
    if init.rank in a.blamed and not any("names rank" in e for e in a.evidence):
        b = a.blamed[init.rank]
        by = f"rank {b.rank}'s" if b.rank is not None else "a"
        a.evidence.append(f"{by} report names rank {init.rank} as the rank that failed ('{b.text[:120]}')")
    if collateral:
        by_sig: dict[str, list] = {}
        for c in collateral:
            by_sig.setdefault(c.signature, []).append(c.rank)
        for sig, rs in by_sig.items():
            a.evidence.append(f"{_ranks(rs)}: {sig} (collateral)")
    for d in demoted[:3]:
        a.evidence.append(f"rank {d.rank}'s {d.exc_type or d.signature} is collateral: {a.roles[id(d)][1]}")
    _launcher_evidence(init, a.fentries, a.evidence, a.hypotheses, {s.rank for s in same})
    collateral = collateral + step7_terminated(a, init, {rkey(c) for c in collateral} | exclude)
    quiet = silent_collateral(a, init, {rkey(c) for c in collateral} | exclude)
    if quiet:
        rs = [f.rank for f in quiet]
        a.evidence.append(f"{_ranks(rs)}: no error of "
                          f"{'their own, their logs just end' if len(rs) > 1 else 'its own, its log just ends'} "
                          "(stopped with the job: collateral)")
    collateral = _by_rank(collateral + quiet)
    summary = (f"{_rank(init.rank)} initiating: {init.title}"
               f"{phase_label(init.phase)} - {tally(len(collateral), len(same))}")
    return Incident(a.attempt, init, collateral, same, None, confidence, a.evidence, summary,
                    hypotheses=a.hypotheses[:MAX_HYPOTHESES])


def _launcher_evidence(init: Finding, fentries, evidence: list[str], hypotheses: list[dict],
                       same: set | frozenset = frozenset()) -> None:
    root = [fe for fe in fentries if fe.root_cause]
    named = sorted({fe.rank for fe in root if fe.rank != init.rank})
    if named and set(named) <= same:
        # the launcher's rank failed of the same (node-level) cause: not a victim, not a rival
        evidence.append(f"torchrun's Root Cause names {_ranks(named)}, which failed of the same cause as "
                        f"rank {init.rank} (see above)")
    elif named:
        evidence.append(
            f"torchrun's Root Cause names {_ranks(named)}; Denpex says "
            f"rank {init.rank} because its own log shows the first initiating failure (launcher summaries are not "
            "trusted: one per node agent, each names the first exit it saw, often a victim)")
        for fe in root:
            if fe.rank != init.rank:
                hypotheses.append({"signature": "torchelastic.failure-record", "rank": fe.rank, "path": fe.path,
                                   "line": fe.line, "time": iso(fe.time), "text": f"exitcode {fe.exitcode}",
                                   "rule": "per the launcher only (torchrun's Root Cause); the rank logs disagree"})
    sigterm = sorted({fe.rank for fe in fentries if fe.exitcode == -15})
    if sigterm:
        evidence.append(f"the agent sent SIGTERM to {_ranks(sigterm)} after the failure")


# -- 5 and 6 ------------------------------------------------------------------------------------


def step5_all_collateral(a: Attempt) -> Incident | None:
    """Every failure is collateral: an external stop, a rank named as the faulty one, a hang
    (:func:`~denpex_tui.core.hang.hang_incident`), and the launcher as the last resort."""
    coll = [f for f in a.errs if f.rank is not None]
    inc = external_stop_incident(a.attempt, a.errs, a.all_fs, a.ranks_seen, a.fentries, a.order.when, a.evidence,
                                 a.hypotheses)
    if inc is not None:
        return inc
    if a.blamed:
        inc = _blamed_incident(a, coll)
        if inc is not None:
            return inc
    inc = step5_vanished(a)
    if inc is not None:
        return inc
    if coll or a.stalls or a.errs:
        inc = hang_incident(a.attempt, coll or a.errs, a.ranks_seen, a.lasts, a.fentries, a.catalog, a.stalls, a.job,
                            a.ctx)
        inc.hypotheses = a.hypotheses + inc.hypotheses
        return step6_victims(a, inc)
    return launcher_incident(a.attempt, a.ctx or a.errs, a.fentries, a.catalog, a.job)


def step6_victims(a: Attempt, inc: Incident) -> Incident:
    """A hang told apart (:mod:`.victims`): the ranks that timed out waiting are victims; a rank
    inside a checkpoint save, or a save under way when their collective started, is the cause."""
    return slow_cause(a, inc)


def step5_vanished(a: Attempt) -> Incident | None:
    """Every failure says a peer went away, no launcher names a rank, and ranks seen in the logs
    printed nothing: the one that stopped first died without a word (:mod:`.vanished`)."""
    inc = vanished_incident(a)
    if inc is not None:
        inc.hypotheses = a.hypotheses + inc.hypotheses
    return inc


def _blamed_incident(a: Attempt, coll: list[Finding]) -> Incident | None:
    """A rank another rank's report names as the faulty one (PyTorch's monitored barrier,
    "please check rank N logs for faulty rank"), when the named rank's own log is not here."""
    blamed = a.blamed
    blamers = {f.rank for f in blamed.values() if f.rank is not None}
    r = sorted(blamed, key=lambda r: (r in blamers, not names_a_stall(blamed[r]), r))[0]
    b = blamed[r]
    init = _entry(b, [b])
    init.rank, init.local_rank, init.role = r, None, "initiating"
    if names_a_stall(b):
        sig = a.catalog.get("dist.rank-stalled")
        init.signature = "dist.rank-stalled"
        init.title = sig.title if sig else "Rank stalled: its peers timed out waiting for it"
        init.phase, init.family = (sig.phase, sig.family) if sig else ("any", "dist")
        ll = a.lasts.get(r)
        if ll is not None:  # its own last line, where it stopped
            init.path, init.line, init.text_line, init.offset, init.text = ll.path, ll.line, ll.line, ll.offset, ll.text
            init.time, init.node_key = ll.time, ll.node_key
    else:
        init.title = f"Named as the faulty rank by {_rank(b.rank, 'a peer')}'s {b.exc_type or b.title}"
    init.fields = {**b.fields, "named_by": b.rank}
    collateral, seen = [], set()
    for f in coll:
        if f.rank == r or f.rank in seen:
            continue
        seen.add(f.rank)
        collateral.append(_entry(f, [f]))
    evidence = [f"{_rank(b.rank, 'a peer')} names rank {r} as the faulty rank: '{b.text[:200]}'; "
                f"rank {r}'s own log is not in these logs (add it to see why it failed)"]
    summary = f"rank {r} initiating: named as the faulty rank by its peer - {tally(len(collateral))}"
    return Incident(a.attempt, init, collateral, [], None, "medium", evidence, summary)


# -- 7 ------------------------------------------------------------------------------------------


def step7_terminated(a: Attempt, init: Finding, have: set) -> list[Finding]:
    """Ranks the agent terminated before they printed an error of their own: collateral."""
    return agent_terminated(a.attempt, a.ranks_seen, have, a.all_fs, a.fentries, init)


def _by_rank(fs: list[Finding]) -> list[Finding]:
    return sorted(fs, key=lambda f: (f.rank if f.rank is not None else 1 << 30))
