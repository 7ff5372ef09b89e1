"""Triage: per attempt, which rank failed first, what is collateral, how sure we are.

Rules (each one is tested on the real corpus):

* The initiating finding is the earliest failure whose role is *initiating*. Collateral-role
  findings (timeouts, peer exits, the agent's SIGTERM) never win over an initiating failure
  on another rank, whatever their times.
* Several ranks failing of the same initiating cause at about the same time (a full
  ``/dev/shm`` or local disk hits every rank of a node) are one cause: the first is the
  initiating finding, the others are ``same_cause``, and the confidence says when their order
  could not be decided.
* Hangs: when every failure is collateral, the initiating rank is the one that stopped: the
  rank missing from the set of ranks that timed out, else the rank whose log went silent
  first; reported as ``dist.rank-stalled`` with its last line.
* Launcher summaries (torchelastic's Root Cause, DeepSpeed's ``exits with return code``) are
  evidence that is reported, never the diagnosis.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Callable

from .catalog import Catalog
from .job import JobState
from .lineparse import parse_level, parse_prefix, parse_time
from .model import Finding, Incident, LastLine, iso
from .text import safe_line

__all__ = ["triage", "rank_ranges", "WARNING_WINDOW"]

WARNING_WINDOW = timedelta(minutes=10)
SAME_CAUSE_WINDOW = timedelta(seconds=60)
_PHASE_WORDS = {
    "checkpoint-save": ("checkpoint", "save", "disk", "space", "quota", "inode", "storage", "writ", "nvme", "swap"),
    "data-loading": ("dataloader", "worker", "shm", "shared memory", "sampler", "dataset"),
    "forward-backward": ("memory", "nan", "inf", "grad", "cuda"),
    "optimizer-step": ("optimizer", "swap", "nvme", "aio", "offload"),
    "startup": ("rendezvous", "init", "connect", "store", "nccl"),
}
_D2 = re.compile(r"work sequence id: (\d+).*?last enqueued work: (\d+), last completed work: (\d+)")


def rank_ranges(ranks) -> str:
    """[0,1,2,5,7,8] -> '0-2,5,7-8'"""
    rs = sorted({r for r in ranks if r is not None})
    if not rs:
        return ""
    out = []
    start = prev = rs[0]
    for r in rs[1:]:
        if r == prev + 1:
            prev = r
            continue
        out.append(f"{start}-{prev}" if prev > start else str(start))
        start = prev = r
    out.append(f"{start}-{prev}" if prev > start else str(start))
    return ",".join(out)


def _ts(t: datetime | None) -> float | None:
    if t is None:
        return None
    if t.tzinfo is None:
        return t.timestamp()
    return t.timestamp()


def _related(sig_a: str, sig_b: str, catalog: Catalog) -> bool:
    if sig_a == sig_b:
        return True
    a, b = catalog.get(sig_a), catalog.get(sig_b)
    if a is None or b is None:
        return False
    return sig_a in b.refines or sig_b in a.refines or bool(set(a.refines) & set(b.refines))


def _phase_label(phase: str) -> str:
    return phase.replace("-", " ")


def triage(
    job: JobState,
    catalog: Catalog,
    *,
    read_tail: Callable[[str, int | None, int], bytes | None] | None = None,
    extra_stalls: dict[int, float] | None = None,
) -> list[Incident]:
    """Incidents in time order. ``read_tail(path, end_offset, max_bytes)`` reads the bytes
    before ``end_offset`` (or the file's end) for the first-warning search; ``extra_stalls``
    maps ranks the live engine saw go silent to their silence in seconds."""
    findings = job.findings()
    ranks_by_attempt = job.ranks_by_attempt()
    last_lines = job.last_lines()
    fentries = job.failure_entries()
    incidents: list[Incident] = []
    attempts = sorted({f.attempt for f in findings} | set(ranks_by_attempt))
    for attempt in attempts:
        fs = [f for f in findings if f.attempt == attempt]
        errs = [f for f in fs if f.severity == "error" and f.role in ("initiating", "collateral")]
        ctx = [f for f in fs if f.severity == "error" and f.role == "context"]
        if not errs and not ctx and not extra_stalls:
            continue
        inc = _attempt_incident(
            attempt,
            errs,
            ctx,
            ranks_by_attempt.get(attempt, set()),
            {k[1]: v for k, v in last_lines.items() if k[0] == attempt},
            [fe for fe in fentries if fe.attempt == attempt],
            catalog,
            extra_stalls or {},
        )
        if inc is None:
            continue
        if inc.initiating is not None and read_tail is not None:
            inc.first_warning = _first_warning(inc.initiating, job, catalog, read_tail)
        incidents.append(inc)
    incidents.sort(key=lambda i: (i.attempt, i.initiating.sort_key() if i.initiating else (float("inf"),)))
    return incidents


def _per_rank_first(fs: list[Finding]) -> dict:
    out: dict = {}
    for f in fs:
        k = f.rank if f.rank is not None else ("?", f.path)
        if k not in out:
            out[k] = (f, 0)
        first, n = out[k]
        out[k] = (first, n + f.count)
    return out


def _collateral_entries(fs: list[Finding], exclude_ranks: set) -> list[Finding]:
    """One entry per other failed rank: its first collateral-role finding (else its first
    finding), with the number of error findings it had."""
    by_rank: dict = {}
    for f in fs:
        k = f.rank if f.rank is not None else ("?", f.path)
        if k in exclude_ranks:
            continue
        by_rank.setdefault(k, []).append(f)
    out = []
    for k, lst in by_rank.items():
        coll = [f for f in lst if f.role == "collateral"] or lst
        first = coll[0]
        entry = Finding(**{**first.__dict__})
        entry.count = sum(f.count for f in lst)
        out.append(entry)
    out.sort(key=lambda f: (f.rank if f.rank is not None else 1 << 30))
    return out


def _attempt_incident(attempt, errs, ctx, ranks_seen, lasts, fentries, catalog, stalls) -> Incident | None:
    evidence: list[str] = []
    init = sorted((f for f in errs if f.role == "initiating"), key=lambda f: f.sort_key())
    # Agent-level lines with no rank (``Sending process N closing signal``) are evidence of
    # teardown, not a rank's failure: they never make a hang on their own.
    coll = [f for f in errs if f.role == "collateral" and f.rank is not None]
    root_entries = [fe for fe in fentries if fe.root_cause]
    if init:
        first = init[0]
        confidence = "high"
        same: list[Finding] = []
        for f in init[1:]:
            if f.rank == first.rank and f.rank is not None:
                continue
            if any(s.rank == f.rank and f.rank is not None for s in same):
                continue
            t0, t1 = _ts(first.time), _ts(f.time)
            close = t0 is None or t1 is None or abs(t1 - t0) <= SAME_CAUSE_WINDOW.total_seconds()
            if _related(f.signature, first.signature, catalog) and close:
                same.append(f)
        exclude = {first.rank if first.rank is not None else ("?", first.path)}
        exclude |= {s.rank if s.rank is not None else ("?", s.path) for s in same}
        others = [f for f in errs if (f.rank if f.rank is not None else ("?", f.path)) not in exclude]
        collateral = _collateral_entries(others, set())
        if first.rank is None:
            confidence = "medium"
            evidence.append("the initiating line carries no rank, and its file name does not give one")
        if first.time is None:
            confidence = "medium"
            evidence.append("no timestamp near the initiating error: order taken from line order")
        elif first.time_approx:
            evidence.append(
                f"rank {first.rank}'s error has no timestamp of its own; its previous line on that rank "
                f"is at {iso(first.time)}"
            )
        if same:
            decided = all(
                s.time is not None and first.time is not None and not s.time_approx and not first.time_approx
                and (_ts(s.time) - _ts(first.time)) > 1.0
                for s in same
            )
            ranks = rank_ranges([first.rank] + [s.rank for s in same])
            if decided:
                evidence.append(f"ranks {ranks} failed of the same cause; rank {first.rank} was first by its timestamp")
                confidence = "medium" if confidence == "high" else confidence
            else:
                evidence.append(
                    f"ranks {ranks} failed of the same cause ({first.signature}) at about the same time: a node- or "
                    "filesystem-level cause; which rank was first cannot be decided from these logs"
                )
                confidence = "low"
        # Was the order against other initiating failures decided by real timestamps?
        rivals = [f for f in init[1:] if f not in same and f.rank != first.rank]
        if rivals and confidence == "high":
            r = rivals[0]
            if first.time is None or r.time is None or first.time_approx or r.time_approx or (
                _ts(r.time) - _ts(first.time) < 1.0
            ):
                confidence = "medium"
                evidence.append(
                    f"rank {r.rank} also failed ({r.signature}); the order between them rests on approximate times"
                )
        if collateral:
            roles = {}
            for c in collateral:
                roles.setdefault(c.signature, []).append(c.rank)
            for sig, rs in roles.items():
                evidence.append(f"ranks {rank_ranges(rs)}: {sig} (collateral)")
        named = sorted({fe.rank for fe in root_entries if fe.rank != first.rank})
        if named:
            evidence.append(
                f"torchelastic's Root Cause names rank{'s' if len(named) > 1 else ''} {rank_ranges(named)}: launcher "
                "summaries (one per node agent) are not trusted, they name victims"
            )
        sigterm = sorted({fe.rank for fe in fentries if fe.exitcode == -15})
        if sigterm:
            evidence.append(f"the agent sent SIGTERM to ranks {rank_ranges(sigterm)} after the failure")
        summary = (
            f"rank {first.rank if first.rank is not None else '?'} initiating: {first.title} "
            f"({_phase_label(first.phase)}) - {len(collateral)} collateral"
        )
        if same:
            summary += f", {len(same)} same cause"
        return Incident(attempt, first, collateral, same, None, confidence, evidence, summary)

    if coll or stalls:
        return _hang_incident(attempt, coll, ranks_seen, lasts, fentries, catalog, stalls)

    # Only launcher-level errors (ChildFailedError, exit codes): report, with low confidence.
    pool = ctx or errs
    if not pool:
        return None
    evidence.append("only launcher reports name a failure; no rank log shows its cause")
    for fe in root_entries:
        evidence.append(f"torchelastic's Root Cause names rank {fe.rank} (exitcode {fe.exitcode}), not trusted")
    return Incident(attempt, None, _collateral_entries(pool, set()), [], None, "low", evidence,
                    "failure reported by the launcher; cause not in these logs")


def _hang_incident(attempt, coll, ranks_seen, lasts: dict[int, LastLine], fentries, catalog, stalls) -> Incident:
    evidence: list[str] = []
    timed_out = {f.rank for f in coll if f.rank is not None}
    missing = sorted(r for r in ranks_seen if r not in timed_out)
    # NCCL watchdog: a rank whose last enqueued work is behind the stuck sequence id never
    # entered the collective (the NeMo skill's rule).
    behind: set[int] = set()
    for f in coll:
        m = _D2.search(f.text)
        if m and f.rank is not None:
            seq, enq, comp = (int(x) for x in m.groups())
            if enq < seq or enq == comp:
                behind.add(f.rank)
    confidence = "medium"
    cands = missing or sorted(behind) or sorted(ranks_seen)
    if stalls:
        live = [r for r in cands if r in stalls] or [r for r in stalls]
        cands = live

    def silent_key(r: int):
        ll = lasts.get(r)
        return (_ts(ll.time) if ll and ll.time else float("inf"), r)

    stalled = min(cands, key=silent_key) if cands else None
    if missing:
        if len(missing) == 1:
            evidence.append(
                f"rank {stalled} is the only rank seen that did not time out; ranks {rank_ranges(timed_out)} timed out "
                "waiting in a collective"
            )
        else:
            evidence.append(
                f"ranks {rank_ranges(missing)} did not time out; rank {stalled} went silent first"
            )
            confidence = "low" if len(missing) > 2 else "medium"
    elif behind:
        evidence.append(f"NCCL watchdog: ranks {rank_ranges(behind)} never enqueued the stuck collective")
    elif stalls:
        evidence.append(f"rank {stalled} stopped logging (live stall, silent {stalls.get(stalled, 0):.0f} s)")
    else:
        evidence.append(f"every rank timed out; rank {stalled}'s log went silent first")
        confidence = "low"
    ll = lasts.get(stalled) if stalled is not None else None
    peers_after = [
        lasts[r].time for r in lasts if r != stalled and lasts[r].time and ll and ll.time and lasts[r].time > ll.time
    ]
    if ll and ll.time and peers_after:
        evidence.append(f"rank {stalled}'s last line is at {iso(ll.time)}; its peers logged until {iso(max(peers_after))}")
        if missing and len(missing) == 1:
            confidence = "high"
    killed = [fe for fe in fentries if fe.rank == stalled and fe.exitcode is not None and fe.exitcode < 0]
    for fe in killed:
        evidence.append(f"the agent reported rank {stalled} with exitcode {fe.exitcode} and no error of its own")
    sig = catalog.get("dist.rank-stalled")
    init = None
    if stalled is not None:
        init = Finding(
            signature="dist.rank-stalled",
            title=sig.title if sig else "Rank stalled: its peers timed out waiting for it",
            role="initiating",
            severity="error",
            phase=sig.phase if sig else "any",
            family="dist",
            path=ll.path if ll else "",
            line=ll.line if ll else 0,
            text_line=ll.line if ll else 0,
            offset=ll.offset if ll else 0,
            text=ll.text if ll else "(no line from this rank)",
            rank=stalled,
            node_key=ll.node_key if ll else None,
            attempt=attempt,
            time=ll.time if ll else None,
            extra={"silent_since": iso(ll.time) if ll else None},
        )
    collateral = _collateral_entries(coll, {stalled})
    summary = (
        f"rank {stalled} initiating: stalled (hang) - {len(collateral)} collateral timed out waiting for it"
        if stalled is not None
        else f"hang: {len(collateral)} ranks timed out; the stalled rank could not be identified"
    )
    return Incident(attempt, init, collateral, [], None, confidence, evidence, summary)


def _first_warning(f: Finding, job: JobState, catalog: Catalog, read_tail) -> dict | None:
    """The first related WARN on the initiating rank in the minutes before its error."""
    if f.rank is None:
        return None
    best = None
    words = _PHASE_WORDS.get(f.phase, ())
    from .matcher import Matcher  # local: avoid a cycle at import time

    matcher = getattr(job, "_matcher", None) or Matcher(catalog)
    job._matcher = matcher  # type: ignore[attr-defined]
    for summary in job.sources():
        if f.rank not in summary.ranks or summary.kind == "error-json":
            continue
        same_file = summary.path == f.path
        end = f.offset if same_file else None
        blob = read_tail(summary.path, end, 2 << 20)
        if not blob:
            continue
        lines = blob.split(b"\n")
        if end is None and lines and not lines[-1]:
            lines.pop()
        # Line numbers: known exactly only in the same file (counted back from the error).
        base = f.text_line - (len(lines) - 1) if same_file else None
        for i, raw in enumerate(lines):
            if i == 0 and (end is None or len(blob) >= (2 << 20)):
                continue  # maybe a partial line
            text = safe_line(raw).text
            pre = parse_prefix(text)
            rank = pre.rank
            if rank is None and pre.local_rank is not None:
                rank = None if summary.kind == "console" and len(summary.ranks) > 1 else f.rank
            if summary.kind != "console" and rank is None:
                rank = f.rank
            if rank != f.rank and not (summary.kind == "console" and pre.local_rank == f.local_rank and pre.local_rank is not None):
                continue
            if parse_level(pre.text) != "warning":
                continue
            t, _ = parse_time(pre.text)
            if f.time is not None and t is not None:
                ft = f.time.replace(tzinfo=None)
                tt = t.replace(tzinfo=None)
                if tt > ft or ft - tt > WARNING_WINDOW:
                    continue
            elif not same_file:
                continue
            sig = matcher.match(pre.text)
            low = pre.text.lower()
            related = (sig is not None and (sig.family == f.family or sig.phase == f.phase)) or any(
                w in low for w in words
            )
            if not related:
                continue
            cand = {
                "signature": sig.id if sig else None,
                "rank": f.rank,
                "path": summary.path,
                "line": (base + i) if base is not None else None,
                "time": iso(t),
                "text": pre.text.strip(),
            }
            key = (t.replace(tzinfo=None) if t else datetime.max, 0 if same_file else 1)
            if best is None or key < best[0]:
                best = (key, cand)
            break  # the first in this source
    return best[1] if best else None
