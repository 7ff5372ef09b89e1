"""The job's story across attempts: one diagnosis that ``scan`` and ``watch`` both tell.

A job that torchrun restarted (``--max-restarts``) has one incident per attempt. The job's root
cause is the first attempt's initiating failure: later attempts often fail of the first one's
consequence (a full disk, a corrupt checkpoint) with a generic error, and must not bury it.
:func:`job_story` takes the incidents the core returns (ordered by attempt) and gives the
headline, the line beneath it ("restarted N times; attempt N failed: ..."), one row per attempt,
and, when torchelastic's Root Cause names another rank than Denpex does, a sentence that says
so and why. Pure: no I/O, no terminal.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from .model import FailureEntry, Finding, Incident
from .words import ranks

__all__ = ["AttemptRow", "Story", "job_story"]


@dataclass(frozen=True)
class AttemptRow:
    attempt: int
    summary: str
    confidence: str
    rank: int | None
    signature: str | None
    is_root: bool


@dataclass(frozen=True)
class Story:
    headline: str  # the job's root cause, with its confidence
    confidence: str
    root: Incident  # the incident the headline tells
    latest: Incident
    restarts: int
    beneath: str | None  # "restarted N times; attempt N failed: ..." (None: one attempt)
    attempts: list[AttemptRow] = field(default_factory=list)
    launcher_note: str | None = None  # torchrun's Root Cause names another rank


def _when(f: Finding | None) -> str | None:
    t = f.time if f is not None else None
    if not isinstance(t, datetime):
        return None
    return t.strftime("%H:%M:%S.%f")[:-3] if t.microsecond else t.strftime("%H:%M:%S")


def _at(f: Finding) -> str:
    """' at HH:MM:SS' of a finding, or, when its time is only its rank's previous timed line (an
    untimestamped traceback), ', logged after HH:MM:SS': an exact time there would not be true."""
    w = _when(f)
    if not w:
        return ""
    return f", logged after {w} (its traceback has no time of its own)" if f.time_approx else f" at {w}"


def _launcher_note(root: Incident, entries: list[FailureEntry]) -> str | None:
    init = root.initiating
    if init is None or init.rank is None:
        return None
    named = sorted({e.rank for e in entries if e.root_cause and e.attempt == root.attempt and e.rank != init.rank})
    if not named:
        return None
    r = named[0]
    same = {s.rank for s in root.same_cause}
    if set(named) <= same:
        # a node-level cause: the launcher's rank failed of the same cause, and is not a victim
        undecided = any("cannot be decided" in e for e in root.evidence)
        order = ("at about the same time; which rank was first cannot be decided from these logs" if undecided
                 else f"later by its timestamp (rank {init.rank} was first)")
        return (f"torchrun's Root Cause names {ranks(named)}; Denpex says rank {init.rank}, but "
                f"{ranks(named)} failed of the same cause {order}")
    theirs = next((c for c in root.collateral if c.rank == r), None)
    mine = _when(init)
    silent = "stall" in init.signature or "hang" in init.signature
    event = f"rank {init.rank} went silent" if silent else f"rank {init.rank}'s own error"
    per = init.fields.get("per")
    if per in ("Flight Recorder dumps", "NCCL RAS"):
        verdict = init.extra.get("verdict") or init.title
        why = f"the {per} show it: {verdict}" if per.startswith("F") else f"NCCL RAS names it: {verdict}"
        if theirs is not None:
            why += f"; rank {r}'s failure was a consequence ({theirs.title})"
    elif theirs is not None:
        why = f"rank {r}'s failure ({theirs.title}"
        if _skewed(theirs, init):
            # the two nodes' clocks disagree and their logged times are in the other order: the
            # sentence says first that the order is the corrected one, then the times as logged
            why += (f") came after {event} once the nodes' clocks are corrected (as logged: rank {r} at "
                    f"{_when(theirs)} on {theirs.node or 'its node'}, rank {init.rank} at {mine} on "
                    f"{init.node or 'its node'}; see the clock note)")
        else:
            at = (f" (its last line at {mine})" if silent else _at(init)) if mine else ""
            why += (f", at {_when(theirs)})" if _when(theirs) else ")") + f" was a consequence: it came after {event}{at}"
    elif mine:
        at = _at(init)
        why = f"rank {init.rank}'s own log shows the first failure{',' + at if at.startswith(' at') else at}"
    else:
        why = f"rank {init.rank}'s own log shows the failure; the launcher names the first process it saw exit"
    return f"torchrun's Root Cause names {ranks(named)}; Denpex says rank {init.rank} because {why}"


def _skewed(later: Finding, first: Finding) -> bool:
    """Two findings on two nodes whose logged times are in the other order than the one the
    triage decided on (after correcting the nodes' clocks)."""
    if later.node_key == first.node_key or not isinstance(later.time, datetime) or not isinstance(first.time, datetime):
        return False
    try:
        return later.time < first.time
    except TypeError:  # one aware, one naive
        return False


def job_story(incidents: list[Incident], failure_entries: list[FailureEntry] | None = None,
              attempts: int | None = None) -> Story | None:
    """The story of ``incidents`` (one per attempt, as the core returns them). ``attempts``:
    how many attempts the job's logs show, when more than the incidents say."""
    if not incidents:
        return None
    incs = sorted(incidents, key=lambda i: i.attempt)
    with_cause = [i for i in incs if i.initiating is not None]
    root = with_cause[0] if with_cause else incs[0]
    latest = incs[-1]
    last_attempt = max(latest.attempt, (attempts - 1) if attempts else 0)
    restarts = last_attempt - incs[0].attempt if last_attempt > incs[0].attempt else 0
    headline = f"{root.summary} · confidence {root.confidence}"
    beneath = None
    if restarts:
        times = "once" if restarts == 1 else f"{restarts} times"
        if latest is root:
            beneath = f"restarted {times}; the later attempts logged no failure of their own"
        else:
            beneath = f"restarted {times}; attempt {latest.attempt} failed: {latest.summary}"
            if latest.initiating is not None and root.initiating is not None \
                    and latest.initiating.signature == root.initiating.signature:
                beneath += " (the same cause again)"
    rows = [AttemptRow(i.attempt, i.summary, i.confidence, i.initiating.rank if i.initiating else None,
                       i.initiating.signature if i.initiating else None, i is root) for i in incs]
    note = _launcher_note(root, failure_entries or [])
    return Story(headline, root.confidence, root, latest, restarts, beneath, rows, note)
