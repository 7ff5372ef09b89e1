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


def _maybe_warnings(blob: bytes, *, skip_first: bool):
    """(index, bytes) of the lines of ``blob`` (split at newlines) whose first 400 bytes hold a
    warning level word or letter, found in C over the whole blob (a line-by-line loop over 2 MB
    took 48 ms of a 0.5 s scan); ``skip_first``: the first line may be partial."""
    seen = -1
    at_line, at_pos = 0, 0  # a line index and its start, advanced as matches come in order
    for m in _MAYBE_WARNING.finditer(blob):
        ls = blob.rfind(b"\n", 0, m.start()) + 1
        if ls <= seen or m.end() - ls > 400:
            continue
        at_line += blob.count(b"\n", at_pos, ls)
        at_pos = ls
        seen = ls
        if at_line == 0 and skip_first:
            continue
        le = blob.find(b"\n", ls)
        yield at_line, blob[ls:le if le >= 0 else len(blob)]


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
        # Line numbers: known exactly only in the same file (counted back from the error).
        n_lines = blob.count(b"\n") + 1
        if end is None and blob.endswith(b"\n"):
            n_lines -= 1
        base = f.text_line - (n_lines - 1) if same_file else None
        for i, raw in _maybe_warnings(blob, skip_first=end is None or len(blob) >= (2 << 20)):
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
