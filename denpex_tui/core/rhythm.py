"""The failure's rhythm: how many checkpoint saves each rank completed before it failed.

"The error occurs after a specific number of checkpoint saves (consistent across runs)" is
the fd-leak entry's tell: a leak of one fd (or one orphaned inode) per save fails at the same
save every time, whatever the step time. For each run given (the scanned job's attempts, and
other failing runs of the same job) this counts, per rank, the saves its own log shows completed
(:mod:`progress`: as the scan counted them in its pass, else read from the file now), the save
the initiating rank failed after (and whether it failed inside a save), and says whether that
number is the same in every run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from .progress import read_progress
from .text import safe_str

__all__ = ["RunRhythm", "Rhythm", "rhythm_of", "combine", "checkpoint_related"]

_RELATED = ("checkpoint", "emfile", "enospc", "fd-leak", "edquot", "write-failed", "too-many-open-files")


@dataclass
class RunRhythm:
    source: str
    attempt: int
    initiating_rank: int | None
    signature: str | None
    saves: dict[int, int] = field(default_factory=dict)  # rank -> saves completed
    in_save: dict[int, bool | None] = field(default_factory=dict)  # rank -> a save started, never completed

    @property
    def failed_after(self) -> int | None:
        return self.saves.get(self.initiating_rank) if self.initiating_rank is not None else None

    def to_json(self) -> dict[str, Any]:
        return {"source": safe_str(self.source), "attempt": self.attempt, "initiating_rank": self.initiating_rank,
                "signature": self.signature, "saves_completed": {str(k): v for k, v in sorted(self.saves.items())},
                "failed_after_saves": self.failed_after,
                "failed_during_save": self.in_save.get(self.initiating_rank) if self.initiating_rank is not None else None}


@dataclass
class Rhythm:
    runs: list[RunRhythm]

    @property
    def consistent(self) -> bool | None:
        counts = [r.failed_after for r in self.runs if r.failed_after is not None]
        if len(counts) < 2:
            return None
        return len(set(counts)) == 1

    def to_json(self) -> dict[str, Any]:
        return {"runs": [r.to_json() for r in self.runs], "consistent": self.consistent}


def checkpoint_related(result) -> bool:
    for inc in result.incidents:
        f = inc.initiating
        if f is None:
            continue
        if f.phase == "checkpoint-save" or any(k in f.signature for k in _RELATED):
            return True
    return False


def rhythm_of(result, source: str) -> list[RunRhythm]:
    """One RunRhythm per attempt of a scanned job that has an incident."""
    results = getattr(result.job, "results", {})
    files: dict[tuple[int, int], list[str]] = {}
    for s in result.job.sources():
        if len(s.ranks) != 1 or s.error or s.kind == "error-json" or not os.path.isfile(s.path):
            continue
        attempt = results[s.path].info.attempt if s.path in results else None
        files.setdefault((attempt or 0, s.ranks[0]), []).append(s.path)
    has_own = {k for k, ps in files.items() if any(results[p].info.kind != "console" for p in ps if p in results)}
    out = []
    for inc in result.incidents:
        ini = inc.initiating
        rr = RunRhythm(source, inc.attempt, ini.rank if ini else None, ini.signature if ini else None)
        for (attempt, rank), paths in sorted(files.items()):
            if attempt != inc.attempt:
                continue
            if (attempt, rank) in has_own:
                paths = [p for p in paths if p in results and results[p].info.kind != "console"]
            best = None
            for p in paths:
                prog = results[p].progress if p in results else None
                if prog is None:  # not counted in the scan's pass (scan_paths' progress_steps_max)
                    try:
                        prog = read_progress(p)
                    except OSError:
                        continue
                if prog.saves_started or prog.saves_done:
                    if best is None or prog.saves_completed > best.saves_completed:
                        best = prog
            if best is not None:
                rr.saves[rank] = best.saves_completed
                last_start = best.saves_started[-1] if best.saves_started else None
                # without completion lines it cannot be told whether the last save finished
                rr.in_save[rank] = (last_start is not None and last_start not in best.saves_done
                                    ) if best.saves_done else None
        if rr.saves:
            out.append(rr)
    return out


def combine(runs: list[list[RunRhythm]]) -> Rhythm:
    return Rhythm([r for rs in runs for r in rs])
