"""``denpex verify``: repeat the run after the fix and require the signature to be gone.

Passes only when all hold:

1. the rerun is the same job: as many ranks as the failing run (a rerun on 1 rank of a 2-rank
   job did not repeat the same input, whatever its logs say);
2. the rerun got at least as far as the failing run: every rank of the rerun reached the step
   (read from the logs, :mod:`progress`) at which the signature appeared before;
3. the signature is absent on every rank of the rerun.

The failing run's side (the baseline: which signatures, at which step) comes from an evidence
bundle (``--from BUNDLE``), from the failing run's own logs (``--from PATH``), or from
``--step N``. Without a baseline the rerun cannot be compared and verify refuses (exit 2).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from .model import Finding
from .progress import read_progress
from .text import safe_str
from .words import count

__all__ = ["Baseline", "VerifyResult", "VerifyError", "rank_progress", "baseline_from_scan", "verify"]


class VerifyError(ValueError):
    pass


@dataclass
class Baseline:
    signatures: list[str]
    step: int | None
    where: list[dict[str, Any]] = field(default_factory=list)  # rank, path, line, step per occurrence
    ranks: int | None = None
    source: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"signatures": list(self.signatures), "step": self.step, "where": list(self.where),
                "ranks": self.ranks, "source": safe_str(self.source)}

    @classmethod
    def from_json(cls, j: dict[str, Any], source: str) -> "Baseline":
        """From a bundle (untrusted): every field's type is checked (one-line ``SchemaError``)."""
        from .schema import SchemaError, opt_int, opt_list

        what = f"{source}: verify_baseline"
        if not isinstance(j, dict):
            raise SchemaError(f"{what}: not a JSON object")
        sigs = opt_list(j, "signatures", what, str)
        if not sigs:
            raise SchemaError(f"{what}: names no signature")
        where = opt_list(j, "where", what, dict)
        for w in where:
            opt_int(w, "rank", what)
            opt_int(w, "step", what)
            opt_int(w, "line", what)
        return cls([str(s) for s in sigs], opt_int(j, "step", what), list(where), opt_int(j, "ranks", what), source)


@dataclass
class VerifyResult:
    baseline: Baseline
    still: list[Finding]
    steps: dict[int, int | None]  # rerun: rank -> last step
    reached: bool | None
    ranks: int
    notes: list[str] = field(default_factory=list)
    same_job: bool = True  # as many ranks as the failing run (when it says how many)

    @property
    def ok(self) -> bool:
        return not self.still and self.reached is True and self.same_job

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": 1,
            "ok": self.ok,
            "baseline": self.baseline.to_json(),
            "still_there": [{"signature": f.signature, "rank": f.rank, "path": safe_str(f.path), "line": f.line,
                             "text": f.text} for f in self.still],
            "rerun": {"ranks": self.ranks, "same_job": self.same_job, "steps": {str(k): v for k, v in sorted(self.steps.items())},
                      "min_step": _min_step(self.steps), "reached": self.reached},
            "notes": list(self.notes),
        }


def _min_step(steps: dict[int, int | None]) -> int | None:
    vals = [v for v in steps.values() if v is not None]
    return min(vals) if len(vals) == len(steps) and vals else None


def rank_progress(result, stop: dict[str, int] | None = None) -> dict[int, list]:
    """Rank -> Progress of each of its own files (files that hold one rank only)."""
    out: dict[int, list] = {}
    for s in result.job.sources():
        if len(s.ranks) != 1 or s.error or not os.path.isfile(s.path) or s.kind == "error-json":
            continue
        try:
            out.setdefault(s.ranks[0], []).append(read_progress(s.path, (stop or {}).get(s.path)))
        except OSError:
            continue
    return out


def _last_step(progs: list) -> int | None:
    vals = [p.last_step for p in progs if p.last_step is not None]
    return max(vals) if vals else None


def baseline_from_scan(result, signatures: list[str] | None, source: str) -> Baseline:
    """Where the signatures appeared in the failing run, and at which step."""
    if not signatures:
        signatures = [i.initiating.signature for i in result.incidents if i.initiating]
        if not signatures:
            raise VerifyError(f"{source}: no failure found there to verify against (give SIGNATURE)")
    hits = [f for f in result.findings if f.signature in set(signatures)]
    # the diagnosis' own initiating finding (a launcher's 'killed by SIGKILL' is made by triage)
    hits += [i.initiating for i in result.incidents if i.initiating is not None
             and i.initiating.signature in set(signatures) and i.initiating not in hits]
    if not hits:
        raise VerifyError(f"{source}: the failing run does not show {', '.join(signatures)}")
    progs = rank_progress(result)
    where = []
    first: dict[Any, Finding] = {}
    for f in hits:
        first.setdefault(f.rank, f)
    for rank, f in sorted(first.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
        step = None
        try:
            step = read_progress(f.path, f.text_line).last_step
        except OSError:
            pass
        if step is None and rank is not None:
            step = _last_step(progs.get(rank, []))  # its stdout: the rank stopped at the failure
        where.append({"signature": f.signature, "rank": rank, "path": safe_str(f.path), "line": f.line, "step": step})
    steps = [w["step"] for w in where if w["step"] is not None]
    if not steps and progs and all(p.last_step is None for ps in progs.values() for p in ps):
        steps = [0]  # the run never printed a step: it failed before the first one
        for w in where:
            w["step"] = 0
    ranks = len({r for s in result.job.sources() for r in s.ranks}) or None
    return Baseline(list(dict.fromkeys(signatures)), max(steps) if steps else None, where, ranks, source)


def verify(result, baseline: Baseline) -> VerifyResult:
    """``result``: the scan of the rerun's logs."""
    wanted = set(baseline.signatures)
    still = [f for f in result.findings if f.signature in wanted]
    progs = rank_progress(result)
    ranks = sorted({r for s in result.job.sources() for r in s.ranks})
    steps = {r: _last_step(progs.get(r, [])) for r in ranks}
    notes = []
    reached: bool | None = None
    if baseline.step is None:
        notes.append("the failing run's step at the signature could not be read from its logs")
    elif not ranks:
        notes.append("no rank could be identified in the rerun's logs")
    else:
        lagging = {r: s for r, s in steps.items() if s is None or s < baseline.step}
        reached = not lagging
        if lagging:
            notes.append("not as far as the failing run (step " + str(baseline.step) + "): "
                         + ", ".join(f"rank {r} at {'no step' if s is None else 'step ' + str(s)}"
                                     for r, s in sorted(lagging.items())))
    same_job = not (baseline.ranks and ranks and len(ranks) != baseline.ranks)
    if not same_job:
        notes.append(f"not the same job: the rerun has {count(len(ranks), 'rank')}, the failing run had "
                     f"{baseline.ranks}; a rerun must repeat the same job to prove the fix")
    return VerifyResult(baseline, still, steps, reached, len(ranks), notes, same_job)
