"""The first related warning on the initiating rank, in the minutes before its error
("identify which rank, node, device, or process emitted the first related warning")."""

from __future__ import annotations

import os
import re
from datetime import datetime, timedelta

from .catalog import Catalog
from .job import JobState
from .lines.facts import line_facts
from .model import Finding, iso

# what a line at warning level shows in its head (the door decides: parse_level)
_MAYBE_WARNING = re.compile(rb"WARN|W\d{4} \d\d:")

__all__ = ["first_warning", "WARNING_WINDOW"]

WARNING_WINDOW = timedelta(minutes=10)
_PHASE_WORDS = {
    "checkpoint-save": ("checkpoint", "save", "disk", "space", "quota", "inode", "storage", "writ", "nvme", "swap"),
    "data-loading": ("dataloader", "worker", "shm", "shared memory", "sampler", "dataset"),
    "forward-backward": ("memory", "nan", "inf", "grad", "cuda"),
    "optimizer-step": ("optimizer", "swap", "nvme", "aio", "offload"),
    "startup": ("rendezvous", "init", "connect", "store", "nccl"),
}


def first_warning(f: Finding, job: JobState, catalog: Catalog, read_tail) -> dict | None:
    """The first related WARN on the initiating rank in the minutes before its error.

    Remembered per job while its inputs stay the same (the finding, the rank's sources and
    their sizes): a diagnosis "so far" is triaged every quarter second while the history is
    read, and this read and split up to 2 MB of each of the rank's files every time."""
    if f.rank is None:
        return None
    sources = [s for s in job.sources() if f.rank in s.ranks and s.kind != "error-json"]
    key = (f.path, f.offset, f.text_line, f.rank, f.local_rank, f.phase, f.family, f.time, id(read_tail),
           tuple((s.path, s.kind, len(s.ranks) > 1, _size(s.path)) for s in sources))
    memo = job.__dict__.setdefault("_first_warning", {})
    if key not in memo:
        if len(memo) >= 64:
            memo.clear()
        memo[key] = _first_warning(f, sources, job, catalog, read_tail)
    hit = memo[key]
    return dict(hit) if hit is not None else None


def _size(path: str) -> int | None:
    try:
        return os.stat(path).st_size
    except OSError:
        return None


def _first_warning(f: Finding, sources: list, job: JobState, catalog: Catalog, read_tail) -> dict | None:
    best = None
    words = _PHASE_WORDS.get(f.phase, ())
    from .matcher import Matcher  # local: avoid a cycle at import time

    # (lines are matched one by one here, never through the prefilter: no Hyperscan compile)
    matcher = getattr(job, "_matcher", None) or Matcher(catalog, small=True)
    job._matcher = matcher  # type: ignore[attr-defined]
    for summary in sources:
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
            if not _MAYBE_WARNING.search(raw, 0, 400):
                continue  # no warning level word or letter: not a warning (C speed, before the door)
            pre = line_facts(raw)
            rank = pre.rank
            if rank is None and pre.local_rank is not None:
                rank = None if summary.kind == "console" and len(summary.ranks) > 1 else f.rank
            if summary.kind != "console" and rank is None:
                rank = f.rank
            if rank != f.rank and not (summary.kind == "console" and pre.local_rank == f.local_rank and pre.local_rank is not None):
                continue
            if pre.level != "warning":
                continue
            t = pre.time
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
