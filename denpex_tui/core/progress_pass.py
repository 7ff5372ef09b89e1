"""Each rank log's steps and checkpoint saves, counted by the history pass as it reads the log.

``scan``'s failure rhythm (:mod:`.rhythm`) needs, for every file that holds one rank, what
:func:`.progress.read_progress` gives; it used to read each such log a second time after the
pass. With ``read_history(..., progress_steps=True)`` the pass (:mod:`.history`) gives each chunk
it reads to a :class:`.progress.ProgressTracker` too (the same rules), beside the source's
processor, and joins the trackers of a big file's ranges as it joins their processors.
``follow`` and ``watch`` do not ask for it.

Only what may be one rank's log is counted: not error.json, and not a file whose lines have
already named two ranks (a console of several ranks, which the rhythm leaves out: counting it
would cost the pass for nothing). A source not counted, or not read to its end, has no tracker:
the rhythm then reads that file itself.
"""

from __future__ import annotations

from .model import SourceInfo
from .pipeline import SourceProcessor
from .progress import ProgressTracker

__all__ = ["after_chunk", "join", "start"]


def start(info: SourceInfo, part: int) -> ProgressTracker | None:
    """A tracker for the source (``part``: which range of it; 0 is its start), or None."""
    if info.kind == "error-json":
        return None
    return ProgressTracker(info.path, at_start=part == 0)


def after_chunk(t: ProgressTracker | None, p: SourceProcessor, data: bytes) -> ProgressTracker | None:
    """``p`` took ``data``: the tracker takes it too, unless ``p``'s lines have named two ranks."""
    if t is None or _two_ranks(p):
        return None
    t.feed(data, p.chunk_groups.get("saves"), p.chunk_lines)
    return t


def join(a: ProgressTracker | None, b: ProgressTracker | None) -> ProgressTracker | None:
    """``b``'s range after ``a``'s: one tracker (None when either range was not counted)."""
    if a is None or b is None:
        return None
    a.join(b)
    return a


def _two_ranks(p: SourceProcessor) -> bool:
    globals_: set[int] = set()
    locals_: set[int] = set()
    for keys in p.keys_seen.values():
        for kind, n in keys:
            (globals_ if kind == "r" else locals_).add(n)
    return len(globals_) > 1 or len(locals_) > 1
