"""Victim or cause: the ranks that timed out waiting, and the rank that was slow.

When one rank is slow outside a collective (most often inside a checkpoint save: rank 0 writing
the model while the others go on to the next all-reduce), every other rank waits in that
collective until its timeout, and NCCL's watchdog then takes each waiting process down with
SIGABRT (``To avoid data inconsistency, we are taking the entire process down``; the launcher
reports exit -6 and torchrun's Root Cause names one of them). Those aborts are the victims. The
slow rank often prints nothing at all. Two facts of the logs tell the cause:

* **where the slow rank stopped**: a hang's stalled rank (:mod:`.hang`) whose last line is a
  checkpoint save's announcement was inside that save;
* **when the collective started**: a timeout report says how long its collective ran (NCCL's
  ``ran for 1200027 milliseconds``, gloo's ``Timed out waiting 15000ms``, a store's ``wait
  timeout after 20000ms``), so the collective began at the report's time minus that. A
  checkpoint save announced just before that moment (:data:`BEFORE` seconds at most), on a rank
  that is not one of those that timed out, was under way while they waited: the saving rank is
  the cause even when its own log is not there or its line carries no rank.

:func:`slow_cause` refines a hang incident with them; the waiting ranks stay collateral and the
evidence says why they are victims.
"""

from __future__ import annotations

import re

from .model import Finding, Incident
from .ranks import rank_entry as _entry
from .ranks import rank_ranges
from .words import rank as _rank
from .words import tally

__all__ = ["slow_cause", "collective_start", "BEFORE", "AFTER"]

BEFORE = 600.0  # a save at most this long before the collective began can be the one it waited for
AFTER = 5.0  # ... or this long after (the two clocks' lines are not the same instant)
_SAVE_SIGS = frozenset({"ckpt.save-start", "hf.trainer-checkpoint-save", "deepspeed.checkpoint-save-start",
                        "megatron.checkpoint-save-start", "lightning.checkpoint-save", "hf.accelerate-save-state"})
_SAVE_TEXT = re.compile(r"\b[Ss]aving (?:the |a )?(?:\w+ ){0,2}checkpoint\b|is about to be saved|saving checkpoint at iteration")
# a line that says a save is done ("Saved checkpoint shard for step 80", "Checkpoint global_step100
# saved"): a rank whose last line is one had left its save when it went silent
_SAVE_DONE = re.compile(r"\b(?:saved|wrote|written|finished)\b.{0,80}\bcheckpoint|\bcheckpoint\b.{0,120}"
                        r"\b(?:saved|written|completed?)\b", re.I)
_RAN_FOR = re.compile(r"ran for (\d{1,12}) milliseconds|Timed out waiting (\d{1,12}) ?ms|wait timeout after (\d{1,12}) ?ms"
                      r"|timed out after (\d{1,12}) ?ms")
_VICTIM_NOTE = ("they waited in a collective for it and timed out: victims. NCCL's watchdog takes such a waiting "
                "process down with SIGABRT (exit -6, 'taking the entire process down'), gloo raises the timeout; "
                "either way the launcher's Root Cause then names one of them")


def collective_start(f: Finding, when) -> float | None:
    """When the collective a timeout report is about began: its time minus how long it ran."""
    m = _RAN_FOR.search(f.text)
    t = when(f)
    if m is None or t is None or f.time_approx:  # a neighbouring line's time is no clock for this
        return None
    ms = int(next(g for g in m.groups() if g))
    return t - ms / 1000.0


def _gap(d: float, word: str = "before") -> str:
    """'0.2 s before' (``d`` >= 0) or '0.6 s after' (``d`` < 0): the first thing relative to the second."""
    other = "after" if word == "before" else "before"
    if abs(d) < 1.0:  # log times are often to the second: no order is claimed inside one
        return "within a second of"
    return f"{abs(d):.1f} s {word if d >= 0 else other}"


def _ranks(rs) -> str:
    rs = sorted(r for r in rs if r is not None)
    return f"rank {rs[0]}" if len(rs) == 1 else f"ranks {rank_ranges(rs)}"


def slow_cause(a, inc: Incident) -> Incident:
    """``inc`` (a hang: every failure collateral) told apart into victims and cause; ``a`` is the
    :class:`~denpex_tui.core.decide.Attempt`. Returns ``inc`` itself, refined, or a new incident."""
    init = inc.initiating
    if init is None:
        return inc
    waited = sorted({f.rank for f in a.errs if f.rank is not None})
    starts = [(s, f) for f in a.errs for s in [collective_start(f, a.order.when)] if s is not None]
    s0, f0 = min(starts, key=lambda x: x[0]) if starts else (None, None)
    saves = _saves_before(a, s0, waited) if s0 is not None else []
    if init.signature == "dist.rank-stalled":
        own = [(t, m) for t, m in saves if m.rank == init.rank]
        mark = a.marks.get(init.rank)
        last = next((x.text for x in (init, mark) if x is not None and _SAVE_TEXT.search(x.text or "")), None)
        t = init.text or ""
        left = bool(_SAVE_DONE.search(t)) and not _SAVE_TEXT.search(t)  # its last line: the save done
        if (own or last) and not left:
            init.phase = "checkpoint-save"
            if own:
                t, m = own[-1]
                said = (f"its checkpoint save was announced {_gap(s0 - t)} its peers' collective began ('{m.text[:140]}'; "
                        f"{_ranks([f0.rank])}'s report minus the time it ran), and no error of its own followed")
            else:
                said = f"its progress stopped at a checkpoint save ('{last[:160]}')"
            inc.evidence.append(f"rank {init.rank} was inside a checkpoint save: {said}; "
                                f"{_ranks(set(waited) - {init.rank})}: " + _VICTIM_NOTE)
            inc.summary = inc.summary.replace("stalled (hang)", "stalled in a checkpoint save (hang)")
        return inc
    if not saves:
        return inc
    return _slow_save_incident(a, inc, waited, s0, f0, saves[-1])


def _saves_before(a, s0: float, waited: list[int]) -> list:
    """(time, marker) of the checkpoint saves announced within [s0 - BEFORE, s0 + AFTER] by a rank
    that is not one of those that timed out (or by a line that names no rank), oldest first."""
    out = []
    for m in a.job.markers():
        if m.attempt != a.attempt or m.time is None or m.signature not in _SAVE_SIGS:
            continue
        if m.rank is not None and m.rank in waited:
            continue
        t = a.order.clocks.adjust(m.node_key, m.time.timestamp())
        if s0 - BEFORE <= t <= s0 + AFTER:
            out.append((t, m))
    out.sort(key=lambda x: x[0])
    return out


def _slow_save_incident(a, inc: Incident, waited: list[int], s0: float, f0: Finding, save) -> Incident:
    t, m = save
    sig = a.catalog.get("dist.rank-stalled")
    who = f"rank {m.rank}" if m.rank is not None else "the rank that logged it (its line names no rank)"
    init = Finding(
        signature="dist.rank-stalled", title="Slow in a checkpoint save: its peers timed out waiting for it",
        role="initiating", severity="error", phase="checkpoint-save", family=sig.family if sig else "dist",
        path=m.path, line=m.line, text_line=m.line, offset=0, text=m.text, rank=m.rank, node_key=m.node_key,
        attempt=a.attempt, time=m.time, fields={"per": "logs", "collective_started": round(s0, 3)})
    evidence = [
        f"{_ranks([f0.rank])}'s collective began {_gap(s0 - t, 'after')} a checkpoint save was announced "
        f"('{m.text[:140]}'): its report ('{f0.text[:120]}') minus the time it ran",
        f"the save was under way while {_ranks(waited)} waited: {who} was inside it, the cause; "
        f"{_ranks(waited)}: " + _VICTIM_NOTE,
    ]
    if m.rank is None:
        evidence.append("which rank saved is not in these logs (in most jobs the checkpoint is written by rank 0); "
                        "its log, or its storage's latency during the save, decides")
    by: dict = {}
    for f in a.errs:
        by.setdefault(f.rank if f.rank is not None else ("?", f.path), []).append(f)
    collateral = [_entry(lst[0], lst) for lst in by.values()]
    collateral.sort(key=lambda f: f.rank if f.rank is not None else 1 << 30)
    hyps = [{"signature": inc.initiating.signature, "rank": inc.initiating.rank, "path": inc.initiating.path,
             "line": inc.initiating.line, "time": None, "text": inc.initiating.text[:300],
             "rule": "a victim: it timed out waiting while the save ran"}]
    summary = (f"{_rank(m.rank, 'the saving rank (its line names none)')} initiating: slow in a checkpoint save - "
               f"{tally(len(collateral))} timed out waiting for it")
    return Incident(a.attempt, init, collateral, [], None, "medium" if m.rank is not None else "low",
                    evidence, summary, hypotheses=hyps + inc.hypotheses)
