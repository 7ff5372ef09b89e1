"""Flight Recorder dumps and NCCL RAS reports as evidence in the diagnosis (step 8 of the rule in
docs/diagnosis.md), merged into the incident the logs gave.

* The dumps **agree** with the logs (their odd rank is the logs' initiating rank): the logs'
  finding stays (it says why: a SIGKILL, an ENOSPC), the dumps' verdict is added as evidence and
  the confidence rises. When the logs only inferred the rank (``dist.rank-stalled``: the rank the
  others waited for), the dumps' finding replaces it: it says where the rank stopped.
* They **disagree** and the logs' initiating failure is a collective's failure or its crash (gloo,
  NCCL, c10d, an abort in a receive thread, a launcher's claim, an inference): a mismatch, a rank
  missing from a collective the others entered, or a rank still started where the others
  completed is stronger evidence: the dumps' rank becomes the initiating one, the logs' pick a
  competing hypothesis, and the incident says what the logs alone would have said.
* They disagree and the logs show a failure of the rank's own (a full disk, an uncaught
  exception in its code): the logs stay, the dumps' verdict is a competing hypothesis.
* No incident from the logs (nothing has failed yet, the job hangs): the dumps' verdict is one.

RAS reports name dead processes and ranks missing from a communicator; they count the same way
when they name exactly one rank. Pure: findings and reports in, an incident out.
"""

from __future__ import annotations

import dataclasses

from .catalog import Catalog
from .frtrace import FRReport, Verdict, report_json
from .model import Finding, Incident, LastLine, iso
from .ranks import rank_ranges
from .ras import RasReport

__all__ = ["apply_dump_evidence"]

_INFERRED = {"dist.rank-stalled"}
_COLLECTIVE_FAMILIES = {"gloo", "nccl", "dist"}
_COLLECTIVE_WORDS = ("gloo", "nccl", "collective", "c10d", "processgroup", "process group", "all_reduce", "allreduce")
_STRONG = {"mismatch", "missing", "stuck"}
_UP = {"low": "medium", "medium": "high", "high": "high"}


def _collective_flavoured(f: Finding) -> bool:
    if f.signature in _INFERRED or f.fields.get("per") == "launcher" or f.family in _COLLECTIVE_FAMILIES:
        return True
    text = " ".join([f.text, *f.chained[:2]]).lower()
    return any(w in text for w in _COLLECTIVE_WORDS)


def _finding(v: Verdict, rank: int, catalog: Catalog, attempt: int, last: LastLine | None,
             fallback: Finding | None) -> Finding:
    sig = catalog.get(v.signature)
    src = last
    f = Finding(
        signature=v.signature, title=sig.title if sig else v.text, role="initiating", severity="error",
        phase=sig.phase if sig else "any", family=sig.family if sig else "torch",
        path=src.path if src else (v.dump or ""), line=src.line if src else v.line,
        text_line=src.line if src else v.line,
        offset=src.offset if src else 0, text=src.text if src else v.text, rank=rank,
        node_key=src.node_key if src else (fallback.node_key if fallback else None), attempt=attempt,
        time=src.time if src else None,
        fields={k: x for k, x in {"per": v.origin, "pg": v.pg, "seq": v.seq, "dump": v.dump,
                                   "where": v.where or None}.items() if x not in (None, "")},
        extra={"verdict": v.text, "silent_since": iso(src.time) if src else None},
    )
    return f


def _ras_verdict(reports: list[RasReport]) -> tuple[list[int], list[str], tuple[str, int]]:
    ranks: set[int] = set()
    ev: list[str] = []
    where = ("", 0)
    for r in reports:
        ranks |= set(r.named_ranks) | {p.rank for p in r.dead if p.rank is not None}
        ev += [f"{e} ({r.path})" if r.path else e for e in r.evidence()]
        if r.named_ranks and r.lines and not where[0]:
            where = (r.path, next((no for no, t in r.lines if "rank" in t.lower()), r.lines[0][0]))
    return sorted(ranks), ev, where


def apply_dump_evidence(inc: Incident | None, attempt: int, fr: FRReport | None, ras: list[RasReport],
                        catalog: Catalog, lasts: dict[int, LastLine]) -> Incident | None:
    """The incident of ``attempt`` with the dumps' and RAS's evidence merged (see the module)."""
    ras_ranks, ras_ev, ras_at = _ras_verdict(ras)
    v = fr.verdict if fr else None
    if v is None and len(ras_ranks) == 1:  # RAS alone names one rank
        named = next((e for e in ras_ev if f"rank {ras_ranks[0]}" in e), ras_ev[0] if ras_ev else "")
        v = Verdict("missing", ras_ranks, "", "", None, named or f"NCCL RAS names rank {ras_ranks[0]}",
                    [e for e in ras_ev if e != named], "medium", dump=ras_at[0] or None, origin="NCCL RAS",
                    line=ras_at[1])
    if v is None and inc is None:
        return None
    if v is None:  # dumps (or RAS) with nothing odd: say so, change nothing
        if fr is not None and inc is not None:
            inc.evidence.append(f"Flight Recorder dumps of ranks {rank_ranges(fr.dumps)}: no rank differs "
                                f"(all at seq {fr.groups[0].last_seq if fr.groups else '?'})")
            inc.collectives = report_json(fr)
        if inc is not None:
            inc.evidence.extend(ras_ev)
        return inc
    rank = v.ranks[0]
    ev = [f"{v.origin}: {v.text}" if fr and v is fr.verdict else v.text]
    ev += [e for e in v.evidence if e != v.text]
    if fr is not None:
        ev += [f"Flight Recorder: {o.text}" for o in fr.others[:3]]
        ev += [f"Flight Recorder: {n}" for n in fr.notes[:3] if "dumps; used" not in n]
    if ras_ev and fr is not None:
        ev += ras_ev
        if ras_ranks and not set(ras_ranks) & set(v.ranks):
            ev.append(f"NCCL RAS names rank{'s' if len(ras_ranks) > 1 else ''} {rank_ranges(ras_ranks)}, not "
                      f"rank {rank}: both are kept")
    init = inc.initiating if inc else None
    if init is not None and init.rank in v.ranks:
        if init.signature in _INFERRED:
            f = _finding(v, init.rank, catalog, attempt, lasts.get(init.rank), init)
            inc.initiating = f
            inc.summary = inc.summary.replace("stalled (hang)", f.title[0].lower() + f.title[1:], 1)
        inc.evidence.extend([f"the {v.origin} agree: {v.text}", *ev[1:]])
        inc.confidence = _UP[inc.confidence] if v.kind in _STRONG or v.kind == "no-dump" else inc.confidence
        inc.collectives = report_json(fr) if fr else None
        return inc
    override = init is None or (v.kind in _STRONG and v.confidence != "low" and _collective_flavoured(init))
    if inc is not None and not override:
        inc.hypotheses.append({"signature": v.signature, "rank": rank, "path": v.dump or "", "line": 0, "time": None,
                               "text": v.text[:300], "rule": "the Flight Recorder dumps point here; the logs show an "
                                                             "earlier failure of the rank's own"})
        inc.evidence.extend(ev)
        inc.collectives = report_json(fr) if fr else None
        return inc
    f = _finding(v, rank, catalog, attempt, lasts.get(rank), init)
    collateral: list[Finding] = []
    same: list[Finding] = []
    hyps: list[dict] = []
    logs_alone = None
    if inc is not None:
        logs_alone = inc.summary
        old = [init] if init is not None else []
        for c in old + inc.collateral + inc.same_cause:
            if c.rank == rank or (c.rank in v.ranks and c.rank is not None):
                continue
            c2 = dataclasses.replace(c)
            c2.role = "collateral"
            collateral.append(c2)
        if init is not None:
            hyps.append({"signature": init.signature, "rank": init.rank, "path": init.path, "line": init.line,
                         "time": iso(init.time), "text": init.text[:300],
                         "rule": "the logs alone: its failure is the first in time, but the Flight Recorder dumps "
                                 "show it as a consequence"})
        hyps += inc.hypotheses
    for r in v.ranks[1:]:
        same.append(_finding(v, r, catalog, attempt, lasts.get(r), init))
    seen: set = set()
    uniq = []
    for c in sorted(collateral, key=lambda c: (c.rank if c.rank is not None else 1 << 30)):
        if c.rank not in seen:
            seen.add(c.rank)
            uniq.append(c)
    if logs_alone:
        ev.insert(1, f"the logs alone would say: {logs_alone}")
    summary = (f"rank {rank} initiating: {f.title} - {len(uniq)} collateral"
               + (f", {len(same)} same cause" if same else "") + f" (from {v.origin.replace('Flight', 'the Flight')})")
    out = Incident(attempt, f, uniq, same, inc.first_warning if inc else None,
                   v.confidence if v.confidence != "low" else "low", ev, summary,
                   hypotheses=hyps[:5], logs_alone=logs_alone, collectives=report_json(fr) if fr else None)
    return out
