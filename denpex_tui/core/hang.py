"""When no rank's own output names an initiating failure: hangs, launcher claims, agent kills.

* **Hang**: every failure is collateral (timeouts, peers gone). The initiating rank is the rank
  the launcher says died of a signal without an error of its own, else the rank missing from the
  set of ranks that timed out, else NCCL's ``last enqueued`` behind, else the first to go silent.
* **Launcher claims** are the last resort, used only when no rank's own output explains the
  failure: torchelastic's failure report and its ``failed (exitcode: -9) local_rank: 4`` line,
  ``Signal 9 (SIGKILL) received by PID``, DeepSpeed's ``exits with return code``, srun's
  ``task 3: Killed``, pdsh's exit lines. Always marked "per the launcher", low confidence, with
  what the exit code means.
* Ranks the agent terminated (``Sending process P closing signal SIGTERM``, exit code -15) before
  they printed an error are collateral: "terminated by the agent".
* Flight Recorder dumps and NCCL RAS reports, when the job has them, are merged last
  (:func:`~denpex_tui.core.frtriage.apply_dump_evidence`): they can name the rank the logs cannot.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .catalog import Catalog
from .detect import signal_name
from .frtriage import apply_dump_evidence
from .model import FailureEntry, Finding, Incident, LastLine, iso
from .ranks import rank_entry as _entry
from .ranks import one_per_rank as _one_per_rank
from .timedout import reported_timeout as _reported_timeout
from .timedout import timed_out_together
from .timedout import timeout_report as _timeout_report
from .words import rank as _rank
from .words import ranks as _ranks_of
from .words import count, tally

__all__ = ["hang_incident", "launcher_incident", "agent_terminated", "external_stop_incident", "exit_meaning", "EXTERNAL_STOPS",
           "apply_dump_evidence"]

# The launcher itself told to stop from outside (scheduler cancel or time limit, a person).
_EXTERNAL_STOP = {"torchelastic.death-signal"}
# Job-level stops from outside: no rank of the job did them.
EXTERNAL_STOPS = frozenset(_EXTERNAL_STOP | {"slurm.job-cancelled-limit"})

_D2 = re.compile(r"work sequence id: (\d+).*?last enqueued work: (\d+), last completed work: (\d+)")
_LAUNCHER_PREFIXES = ("mpirun.", "horovod.process-", "colossalai.launch")
_TIMEOUT_KIND = re.compile(r"timeout|stuck|heartbeat|stalled|section|hang|dump-signal")
_LAUNCHER_IDS = (
    "torchelastic.child-process-failed", "torchelastic.worker-signaled", "deepspeed.launcher-exit-code",
    "slurm.task-signaled", "slurm.task-exit-code", "pdsh.remote-exit", "torchelastic.child-failed",
    "os.oom-kill",
)
_MEANING = {
    "SIGKILL": "SIGKILL: killed from outside, usually by the kernel OOM killer (host RAM or the job's memory cgroup); "
               "check the node's kernel log (dmesg -T, journalctl -k)",
    "SIGABRT": "SIGABRT: an abort (a failed assert, an uncaught C++ exception, the NCCL watchdog)",
    "SIGBUS": "SIGBUS: a bus error, often a full /dev/shm or a truncated memory-mapped file",
    "SIGSEGV": "SIGSEGV: a segmentation fault in native code",
    "SIGTERM": "SIGTERM: terminated, usually by the agent or the scheduler after another failure",
    "SIGFPE": "SIGFPE: a floating-point exception in native code",
}
# The launcher tearing the job down after a failure: the ranks it stops are collateral.
_TEARDOWN = {
    "torchelastic.closing-signal", "torchelastic.forced-kill", "mpirun.job-aborted", "mpirun.process-signaled",
    "mpirun.first-failed-process", "slurm.step-teardown", "slurm.step-aborted", "deepspeed.launcher-killing-subprocess",
    "slurm.job-cancelled-limit", "torchelastic.death-signal",
}
_CRASH = {"SIGSEGV", "SIGBUS", "SIGABRT", "SIGFPE", "SIGILL"}
_SIGNAL_WORD = re.compile(r"(Killed|Aborted|Segmentation fault|Bus error|Terminated|Floating point exception)")
_TASKS = re.compile(r"\btasks? (\d{1,7})(?:[,-]|: )")


def exit_meaning(exitcode: int | None = None, sig: str | None = None) -> str:
    if sig is None and exitcode is not None and exitcode < 0:
        sig = signal_name(-exitcode)
    if sig:
        return _MEANING.get(sig, f"{sig}: killed by a signal")
    if exitcode is not None:
        return f"exit code {exitcode}: the process exited with an error; its own output should say why"
    return "the launcher gives no exit code"


def _ts(t: datetime | None) -> float | None:
    return t.timestamp() if t is not None else None


def _signal_of(f: Finding) -> str | None:
    if f.fields.get("signal"):
        return signal_name(str(f.fields["signal"]))
    if f.fields.get("signum"):
        try:
            return signal_name(int(f.fields["signum"]))
        except (TypeError, ValueError):
            pass
    code = f.fields.get("exitcode")
    if code is not None:
        try:
            c = int(code)
        except (TypeError, ValueError):
            c = None
        if c is not None and c < 0:
            return signal_name(-c)
        if c is not None and c > 128:
            return signal_name(c - 128)
    m = re.search(r"Signal (\d{1,2}) \(", f.text) or re.search(r"killed by signal (\d{1,2})", f.text)
    if m:
        return signal_name(int(m.group(1)))
    m = _SIGNAL_WORD.search(f.text)
    if m and f.signature.startswith("slurm."):
        return signal_name(m.group(1))
    if f.signature == "os.oom-kill":
        return "SIGKILL"
    return None


def _launcher_rank(f: Finding, job) -> int | None:
    if f.rank is not None:
        return f.rank
    local = f.fields.get("local_rank")
    if local is not None and job is not None:
        try:
            job.resolve()
            return job._resolver(f.node_key, None, int(local))
        except (ValueError, TypeError, AttributeError):
            return None
    m = _TASKS.search(f.text)
    if m and f.signature.startswith("slurm."):
        return int(m.group(1))
    return None


def _killed_finding(attempt: int, rank: int | None, sig_name: str | None, src, catalog: Catalog,
                    text: str, exitcode: int | None) -> Finding:
    if sig_name in _CRASH:
        sid = "proc.fatal-signal"
    elif sig_name:
        sid = "proc.killed"
    else:
        sid = getattr(src, "signature", None) or "torchelastic.failure-record"
    sig = catalog.get(sid) or catalog.get("proc.killed")
    path = getattr(src, "path", "")
    line = getattr(src, "line", 0)
    return Finding(
        signature=sig.id if sig else sid,
        title=(f"{'Crashed on' if sig_name in _CRASH else 'Killed by'} {sig_name}, per the launcher" if sig_name
               else f"Exited with code {exitcode}, per the launcher"),
        role="initiating", severity="error", phase=sig.phase if sig else "any", family=sig.family if sig else "proc",
        path=path, line=line, text_line=getattr(src, "text_line", line), offset=getattr(src, "offset", 0),
        text=text, rank=rank, node_key=getattr(src, "node_key", None), node=getattr(src, "node", None),
        attempt=attempt, time=getattr(src, "time", None), time_approx=bool(getattr(src, "time_approx", False)),
        fields={k: v for k, v in {"signal": sig_name, "exitcode": exitcode, "per": "launcher"}.items() if v is not None},
    )


def _launcher_claims(attempt: int, pool: list[Finding], fentries: list[FailureEntry], job) -> list[tuple]:
    """(time, rank, signal, exitcode, source, text) of every claim a launcher makes."""
    claims = []
    for fe in fentries:
        if fe.exitcode in (None, 0) or fe.rank is None or fe.rank < 0:
            continue
        sname = signal_name(-fe.exitcode) if fe.exitcode < 0 else None
        claims.append((_ts(fe.time), fe.rank, sname, fe.exitcode, fe,
                       f"torchelastic's failure report: rank {fe.rank} exitcode {fe.exitcode}"))
    for f in pool:
        if f.signature not in _LAUNCHER_IDS and not f.signature.startswith(_LAUNCHER_PREFIXES):
            continue
        rank = _launcher_rank(f, job)
        code = f.fields.get("exitcode")
        try:
            code = int(code) if code is not None else None
        except (TypeError, ValueError):
            code = None
        claims.append((_ts(f.time), rank, _signal_of(f), code, f, f.text))
    return claims


def launcher_incident(attempt: int, pool: list[Finding], fentries: list[FailureEntry], catalog: Catalog,
                      job) -> Incident | None:
    claims = _launcher_claims(attempt, pool, fentries, job)
    ranked = ([c for c in claims if c[1] is not None and c[2] != "SIGTERM"] or [c for c in claims if c[1] is not None]
              or [c for c in claims if c[2] != "SIGTERM"] or claims)
    if not ranked:
        if not pool:
            return None

        return Incident(attempt, None, [_entry(f, [f]) for f in pool[:50]], [], None, "low",
                        ["only launcher reports name a failure, and they name no rank"],
                        "failure reported by the launcher; cause not in these logs")
    # Earliest claim; a root-cause flag breaks ties (torchelastic's first observed failure).
    ranked.sort(key=lambda c: (c[0] if c[0] is not None else float("inf"),
                               0 if getattr(c[4], "root_cause", False) else 1))
    t, rank, sname, code, src, text = ranked[0]
    init = _killed_finding(attempt, rank, sname, src, catalog, text, code)
    evidence = [
        f"per the launcher: no rank's own output explains the failure; {exit_meaning(code, sname)}",
    ]
    others = sorted({c[1] for c in ranked[1:] if c[1] is not None and c[1] != rank})
    if others:
        evidence.append(f"the launcher also reports {_ranks_of(others)} failing after it")
    hyps = [{"signature": "proc.killed", "rank": c[1], "path": getattr(c[4], "path", ""), "line": getattr(c[4], "line", 0),
             "time": iso(datetime.fromtimestamp(c[0])) if c[0] else None, "text": c[5][:300],
             "rule": "a later launcher claim"} for c in ranked[1:4] if c[1] != rank]
    who = f"rank {rank}" if rank is not None else "a rank the launcher does not name"
    summary = f"{who} initiating: {init.title} - cause not in the ranks' own logs"
    return Incident(attempt, init, [], [], None, "low", evidence, summary, hypotheses=hyps)


def agent_terminated(attempt: int, ranks_seen: set, have: set, all_fs: list[Finding], fentries, init) -> list[Finding]:
    """Collateral entries for ranks the agent SIGTERMed before they printed an error."""
    closing = [f for f in all_fs if f.signature in _TEARDOWN]
    killed = {fe.rank for fe in fentries if fe.exitcode == -15 and fe.rank is not None}
    if not closing and not killed:
        return []
    out = []
    src = closing[0] if closing else None
    for r in sorted((set(ranks_seen) | killed) - {x for x in have if isinstance(x, int)}):
        if init is not None and r == init.rank:
            continue
        out.append(Finding(
            signature="torchelastic.closing-signal", title="Terminated by the launcher (no error of its own)",
            role="collateral", severity="warning", phase="shutdown", family="torchelastic",
            path=src.path if src else "", line=src.line if src else 0, text_line=src.text_line if src else 0,
            offset=src.offset if src else 0, text=src.text if src else "exitcode -15 (SIGTERM) per the failure report",
            rank=r, attempt=attempt, time=src.time if src else None, fields={"per": "agent"},
        ))
    return out


def external_stop_incident(attempt, errs, all_fs, ranks_seen, fentries, when, evidence, hypotheses) -> Incident | None:
    """Nothing failed before the launcher itself was told to stop: that is the cause, and every
    rank's error after it is the shutdown's collateral. Not when ranks were already failing
    (a hang, peers gone) before the stop: then the stop came after the cause."""
    stop = next((f for f in all_fs if f.signature in _EXTERNAL_STOP), None)
    if stop is None or when(stop) is None:
        return None
    t_stop = when(stop)
    if any((when(f) or t_stop) < t_stop - 1.0 for f in errs):
        return None
    init = _entry(stop, [stop])
    init.role, init.severity = "initiating", "error"
    init.title = "Stopped from outside: the launcher received a termination signal"
    by: dict = {}
    for f in errs:
        if f is not stop:
            by.setdefault(f.rank if f.rank is not None else ("?", f.path, f.local_rank), []).append(f)
    collateral = [_entry(lst[0], lst) for lst in by.values()]
    evidence.append(f"the launcher was stopped from outside ('{stop.text[:120]}'); no rank's own failure "
                    "comes before it, so the errors after it are the shutdown's collateral")
    have = {c.rank for c in collateral if c.rank is not None}
    collateral += agent_terminated(attempt, ranks_seen, have, all_fs, fentries, init)
    collateral.sort(key=lambda f: (f.rank if f.rank is not None else 1 << 30))
    return Incident(attempt, init, collateral, [], None, "medium", evidence,
                    "stopped from outside: the launcher received a termination signal", hypotheses=hypotheses)


@dataclass
class _Hang:
    """What the hang rules read: the attempt's collateral findings, the ranks seen, their last
    lines, the launcher's failure entries, live stalls, and what follows from them."""

    attempt: int
    coll: list[Finding]
    ranks_seen: Any
    lasts: dict[int, LastLine]
    fentries: list
    catalog: Catalog
    stalls: Any
    timed_out: set = field(default_factory=set)
    missing: list = field(default_factory=list)


def hang_incident(attempt, coll, ranks_seen, lasts: dict[int, LastLine], fentries, catalog, stalls, job,
                  ctx: list[Finding] | None = None) -> Incident:
    """The incident of a hang (every error is a timeout or a peer gone), by the first rule that
    decides: a rank the launcher says was killed; a report that names the rank it timed out on;
    every rank reporting its peer gone; only the waiting rank's side in the logs; ranks that
    timed out together; else the rank that did not time out, or was behind, or went silent
    first (``_stalled``)."""
    timed_out = {f.rank for f in coll if f.rank is not None}
    h = _Hang(attempt, coll, ranks_seen, lasts, fentries, catalog, stalls, timed_out,
              sorted(r for r in ranks_seen if r not in timed_out))
    inc = _killed_first(h, job, ctx)
    if inc is not None:
        return inc
    if not h.missing and not stalls:
        inc = _reported_timeout(attempt, coll, catalog)
        if inc is not None:
            return inc
    waited = [f for f in coll if _TIMEOUT_KIND.search(f.signature)]
    if coll and not waited and not stalls:
        return _peer_gone(h)
    if not h.missing and not stalls and set(ranks_seen) <= timed_out and len(timed_out - {None}) <= 1 and coll:
        return _only_waiters(h)
    behind: set[int] = set()
    for f in coll:
        m = _D2.search(f.text)
        if m and f.rank is not None:
            seq, enq, comp = (int(x) for x in m.groups())
            if enq < seq or enq == comp:
                behind.add(f.rank)
    if not h.missing and not behind and not stalls:
        inc = timed_out_together(attempt, coll, lasts, catalog)
        if inc is not None:
            return inc
    return _stalled(h, behind)


def _killed_first(h: _Hang, job, ctx: list[Finding] | None) -> Incident | None:
    """A rank the launcher says died of a signal, with no error of its own, is the likeliest cause."""
    claims = [c for c in _launcher_claims(h.attempt, ctx or [], h.fentries, job)
              if c[1] is not None and c[2] != "SIGTERM" and c[1] not in h.timed_out
              and (c[2] is not None or c[4].__class__.__name__ != "FailureEntry")]
    if not claims:
        return None
    claims.sort(key=lambda c: c[0] if c[0] is not None else float("inf"))
    t, rank, sname, code, src, text = claims[0]
    init = _killed_finding(h.attempt, rank, sname, src, h.catalog, text, code)
    collateral = []
    seen = set()
    for f in h.coll:
        if f.rank != rank and f.rank not in seen:
            seen.add(f.rank)
            collateral.append(_entry(f, [x for x in h.coll if x.rank == f.rank]))
    evidence = [f"per the launcher, rank {rank} failed first with no error of its own in these logs: "
                f"{exit_meaning(code, sname)}"]
    if h.timed_out - {None}:
        evidence.append(f"{_ranks_of(h.timed_out)} failed after it, waiting for it (collateral)")
    summary = f"rank {rank} initiating: {init.title} - {tally(len(collateral))}"
    return Incident(h.attempt, init, collateral, [], None, "medium", evidence, summary)


def _first(coll: list[Finding]) -> Finding:
    return min(coll, key=lambda f: (_ts(f.time) if f.time else float("inf"), f.source_order, f.text_line))


def _peer_gone(h: _Hang) -> Incident:
    """Every rank here reports its peer gone (closed, reset, a remote error), none timed out
    waiting: the rank that failed first died; its own output is not in these logs."""
    first = _first(h.coll)
    init = _entry(first, [x for x in h.coll if x.rank == first.rank])
    evidence = [
        f"every rank in these logs reports a peer gone ({first.signature}), none timed out waiting: the rank "
        "that failed first is not in these logs (add its log, or the launcher's, to name it)"
    ]
    hyps = [{"signature": "dist.rank-stalled", "rank": r, "path": "", "line": 0, "time": None, "text": "",
             "rule": "seen in these logs without an error of its own"} for r in h.missing[:3]]
    others = [_entry(f, [f]) for f in h.coll if f.rank != first.rank]
    return Incident(h.attempt, init, _one_per_rank(others), [], None, "low", evidence,
                    f"{_rank(first.rank)}: {first.title} - the peer that went "
                    "away is not in these logs", hypotheses=hyps)


def _only_waiters(h: _Hang) -> Incident:
    """Only the rank(s) that timed out are in these logs: the one that stalled is not."""
    first = _first(h.coll)
    first = _timeout_report([x for x in h.coll if x.rank == first.rank]) or first
    init = _entry(first, [x for x in h.coll if x.rank == first.rank])
    evidence = [
        f"only {_rank(first.rank)}'s side is in these logs: it failed waiting for "
        "a peer, and the rank that stalled or failed first is not in these logs (add its log to name it)"
    ]
    return Incident(h.attempt, init, [], [], None, "low", evidence,
                    f"{_rank(first.rank)}: {first.title} - the rank it waited for is not in these logs")


def _stalled(h: _Hang, behind: set[int]) -> Incident:
    """The rank that stalled: one that did not time out, or was behind in the stuck collective,
    or (live) stopped logging, or whose log went silent first; its peers are collateral."""
    missing, stalls, lasts = h.missing, h.stalls, h.lasts
    cands = missing or sorted(behind) or sorted(h.ranks_seen)
    if stalls:
        cands = [r for r in cands if r in stalls] or [r for r in stalls]

    def silent_key(r: int):
        ll = lasts.get(r)
        return (_ts(ll.time) if ll and ll.time else float("inf"), r)

    stalled = min(cands, key=silent_key) if cands else None
    evidence, confidence = _stall_evidence(h, behind, stalled)
    ll = lasts.get(stalled) if stalled is not None else None
    init = _stalled_finding(h, stalled, ll) if stalled is not None else None
    by_rank: dict = {}
    for f in h.coll:
        if f.rank != stalled:
            by_rank.setdefault(f.rank, []).append(f)
    collateral = []
    for r, lst in by_rank.items():
        cs = [f for f in lst if f.role == "collateral"] or lst
        collateral.append(_entry(cs[0], lst))
    collateral.sort(key=lambda f: (f.rank if f.rank is not None else 1 << 30))
    summary = (
        f"rank {stalled} initiating: stalled (hang) - {tally(len(collateral))} timed out waiting for it"
        if collateral and stalled is not None
        else f"rank {stalled} initiating: stalled (hang)" if stalled is not None
        else f"hang: {count(len(collateral), 'rank')} timed out; the stalled rank could not be identified"
    )
    return Incident(h.attempt, init, collateral, [], None, confidence, evidence, summary)


def _stall_evidence(h: _Hang, behind: set[int], stalled: int | None) -> tuple[list[str], str]:
    """Why ``stalled`` is the one, and how sure that is."""
    missing, stalls, lasts = h.missing, h.stalls, h.lasts
    evidence: list[str] = []
    confidence = "medium"
    if missing:
        if len(missing) == 1:
            evidence.append(
                f"rank {stalled} is the only rank seen that did not time out; {_ranks_of(h.timed_out)} timed out "
                "waiting in a collective"
            )
        else:
            evidence.append(f"{_ranks_of(missing)} did not time out; rank {stalled} went silent first")
            confidence = "low" if len(missing) > 2 else "medium"
    elif behind:
        evidence.append(f"NCCL watchdog: {_ranks_of(behind)} never enqueued the stuck collective")
    elif stalls:
        evidence.append(f"rank {stalled} stopped logging (live stall, silent {stalls.get(stalled, 0):.0f} s)")
    else:
        evidence.append(f"every rank timed out; rank {stalled}'s log went silent first")
        confidence = "low"
    ll = lasts.get(stalled) if stalled is not None else None
    if ll and ll.time:
        later = max((x.time for r, x in lasts.items() if r != stalled and x.time and x.time > ll.time), default=None)
        if later is not None:
            evidence.append(f"rank {stalled}'s last line is at {iso(ll.time)}; its peers logged until {iso(later)}")
            if missing and len(missing) == 1:
                confidence = "high"
    for fe in h.fentries:
        if fe.rank == stalled and fe.exitcode is not None and fe.exitcode < 0:
            evidence.append(f"the agent reported rank {stalled} with exitcode {fe.exitcode} and no error of its own")
    return evidence, confidence


def _stalled_finding(h: _Hang, stalled: int, ll: LastLine | None) -> Finding:
    sig = h.catalog.get("dist.rank-stalled")
    return Finding(
        signature="dist.rank-stalled",
        title=sig.title if sig else "Rank stalled: its peers timed out waiting for it",
        role="initiating", severity="error", phase=sig.phase if sig else "any", family="dist",
        path=ll.path if ll else "", line=ll.line if ll else 0, text_line=ll.line if ll else 0,
        offset=ll.offset if ll else 0, text=ll.text if ll else "(no line from this rank)", rank=stalled,
        node_key=ll.node_key if ll else None, attempt=h.attempt, time=ll.time if ll else None,
        extra={"silent_since": iso(ll.time) if ll else None},
    )

