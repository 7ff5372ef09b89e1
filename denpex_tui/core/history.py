"""The history pass: every source's bytes read once, by the one reader, on every core.

``scan`` reads a finished job with it; ``follow`` and ``watch`` read the files' history with it
before following what is written next (from where it stopped, :attr:`SourceHistory.stop`).
For each source, one pass gives its processor (findings, last lines, open reports, ready to
take the live lines that follow) and, for the view, its line index (:mod:`.lines.index`).

* **Order.** Largest work first, so the pool stays busy to the end; a text file bigger than
  ``2 x RANGE_BYTES``, or than its worker's share of the job, is cut at line starts into a
  multiple of the workers' number of ranges, read in parallel and joined (:mod:`.ranges`): one
  big file is no slower per byte than the same bytes as a folder.
* **Parallel** (``jobs`` processes, forked with the compiled matcher) when the history is at
  least :data:`PARALLEL_MIN_BYTES`; otherwise in the calling thread. This module plans the
  tasks and joins their results; :mod:`.historypool` runs them.
* **Hung mounts.** A read that does not return for ``io_timeout`` seconds (a hung NFS/FUSE
  mount) makes that source an error with what it had found; the others go on. Work that is
  merely slow (the CPU is busy) is never mistaken for a hang: only time spent inside a read
  counts.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Callable

from . import progress_pass
from .lines.chunk import chunk_lines
from .lines.index import FileIndex
from .lines.reader import SourceError, line_start_after, read_chunks, text_kind
from .matcher import Matcher
from .model import SourceInfo
from .pipeline import SourceProcessor
from .stopmarks import WINDOW as STOP_WINDOW
from .ranges import absorb, join_index, open_at_end

if TYPE_CHECKING:
    from .progress import ProgressTracker

__all__ = ["SourceHistory", "ReadProgress", "read_history", "PARALLEL_MIN_BYTES", "RANGE_BYTES", "IO_TIMEOUT_S"]

PARALLEL_MIN_BYTES = 48 << 20
RANGE_BYTES = 24 << 20
MIN_RANGE_BYTES = 8 << 20  # a file above its share of the work is cut into ranges at least this big
IO_TIMEOUT_S = 60.0
ERROR_JSON_MAX = 4 << 20


@dataclass
class SourceHistory:
    info: SourceInfo
    processor: SourceProcessor
    index: FileIndex | None = None
    stop: int = 0  # offset after the last line read (a follower starts there)
    ident: tuple[int, int] | None = None  # (device, inode) of the file read
    kind: str = "text"
    progress: ProgressTracker | None = None  # its steps and saves, counted as it was read (progress_steps)


class ReadProgress:
    """How much of the history is read: safe to ask from another thread while it runs."""

    def __init__(self) -> None:
        self.total = 0  # bytes of the sources at discovery
        self.sources = 0
        self.finished_sources = 0
        self._done = 0  # bytes of finished tasks
        self._said = 0  # the most read() said
        self._boxes: list[dict] = []  # live readers in this process
        self._shared = None  # a counter the pool's workers add to
        self.started = time.monotonic()
        self.ended: float | None = None
        self.cancelled = False
        self.unknown_only = False  # scan's pass for error-looking lines no detector knows
        self.progress_steps = False  # scan's: each rank log's steps and saves counted too (progress_pass)

    def cancel(self) -> None:
        """Stop reading (the user quit): what is being read is dropped."""
        self.cancelled = True

    def read(self) -> int:
        """Bytes read so far; never less than it said before. A worker takes its bytes off the
        shared counter when its task ends, and the parent adds the task up to 0.25 s later: the
        header showed ``48 % · 90 MB`` then ``46 % · 87 MB``."""
        live = sum(b.get("read", 0) for b in list(self._boxes))
        if self._shared is not None:
            live += self._shared.value
        now = min(self.total, self._done + live) if self.total else self._done + live
        self._said = max(self._said, now)
        return self._said

    @property
    def complete(self) -> bool:
        return self.ended is not None


@dataclass
class _Task:
    info: SourceInfo
    start: int = 0
    end: int | None = None
    part: int = 0
    parts: int = 1

    @property
    def size(self) -> int:
        return (self.end if self.end is not None else self.info.size) - self.start


def _year_hint(path: str) -> int | None:
    try:
        return datetime.fromtimestamp(os.stat(path).st_mtime).year
    except (OSError, OverflowError, ValueError):
        return None


def _run(task: _Task, matcher: Matcher, index: bool | str, partial_tail: bool, box: dict) -> SourceHistory:
    """One task in this process: the source (or one range of it) through the pipeline."""
    info = task.info
    p = SourceProcessor(info, matcher, year_hint=_year_hint(info.path))
    if task.part:
        p.first_time_done()
    idx = FileIndex(info.path, console=info.kind == "console", continued=task.part > 0) if index else None
    if idx is not None:
        idx.year_hint = p.year_hint
    lock = box.setdefault("lock", threading.Lock())
    box["p"] = p
    out = SourceHistory(info, p, idx, task.start)
    try:
        if info.kind == "error-json":
            _error_json(p, idx, box)
            out.stop = box.get("stop", task.start)  # read whole: the follower starts after it
        else:
            last = task.part == task.parts - 1
            stop = box.get("should_stop")
            unknown_only = box.get("unknown_only", False)
            steps = progress_pass.start(info, task.part) if box.get("progress_steps") and not unknown_only else None
            end = task.end if task.end is not None else info.size  # (as discovered: it may still grow)
            unmarked = None  # the last chunk, fed as if more followed
            for off, data in read_chunks(info.path, start=task.start, end=task.end,
                                         partial_tail=partial_tail and last, progress=box):
                if stop is not None and stop():
                    break
                with lock:
                    if box.get("abandoned"):  # the watchdog gave up and kept what we found
                        break
                    if unknown_only:
                        p.feed_unknown(data, off)
                    else:
                        # (offsets of a gzip or UTF-16 file are its decoded text's: no size known)
                        more = end - off - len(data) if box.get("kind") == "text" else 0
                        p.feed(data, off, more=more)
                        unmarked = (data, off) if more >= STOP_WINDOW else None
                        steps = progress_pass.after_chunk(steps, p, data)
                    if idx is not None:
                        idx.add(chunk_lines(off, data, console=idx.console, year_hint=idx.year_hint, src=info,
                                            times=index != "lines"))
                        idx.end = box.get("stop", off + len(data))
            else:  # read to its end: what it counted holds
                out.progress = steps
                if unmarked is not None:  # the file was cut short while it was read
                    p.record_stop_marks(*unmarked)
            out.stop = box.get("stop", task.start)
            out.ident = box.get("ident")
            out.kind = box.get("kind", "text")
    except SourceError as exc:
        p.errors.append(str(exc))
    except OSError as exc:
        p.errors.append(f"{info.path}: read error ({exc.strerror or exc})")
    if idx is not None:
        idx.end = out.stop
    return out


def _error_json(p: SourceProcessor, idx: FileIndex | None, box: dict) -> None:
    from .lines.reader import read_tail

    blob = read_tail(p.info.path, None, ERROR_JSON_MAX + 1) or b""
    if len(blob) > ERROR_JSON_MAX:
        p.errors.append(f"{p.info.path}: error file larger than 4 MiB: skipped")
        return
    p.feed_error_json(blob)
    p.bytes_read = len(blob)  # the file's bytes read (the feed counted its message's)
    if idx is not None and blob:
        data = blob if blob.endswith(b"\n") else blob + b"\n"
        idx.add(chunk_lines(0, data, console=False, year_hint=idx.year_hint, src=p.info))
        idx.end = len(blob)
    box["stop"] = len(blob)


# -- planning ------------------------------------------------------------------------------


def _plan(sources: list[SourceInfo], jobs: int) -> list[_Task]:
    tasks: list[_Task] = []
    # a file bigger than its worker's fair share is cut too (a 96 MB console beside four 22 MB
    # rank logs kept one worker busy twice as long as the other)
    share = sum(s.size for s in sources) / max(jobs, 1)
    for s in sources:
        big = s.size >= 2 * RANGE_BYTES or (s.size > share and s.size >= 2 * MIN_RANGE_BYTES)
        if jobs > 1 and s.kind != "error-json" and big and not _sparse(s.path):
            try:
                kind = text_kind(s.path)
            except SourceError:
                kind = "?"
            if kind == "text":
                tasks.extend(_ranges(s, jobs))
                continue
        tasks.append(_Task(s))
    return tasks


def _sparse(path: str) -> bool:
    """Holes (a region never written): read whole, they are skipped at seek speed."""
    try:
        st = os.stat(path)
    except OSError:
        return True
    return st.st_size > 512 * getattr(st, "st_blocks", st.st_size) + (1 << 20)


def _ranges(s: SourceInfo, jobs: int = 2) -> list[_Task]:
    """The file cut into a multiple of ``jobs`` ranges of at most about RANGE_BYTES: three
    ranges of a 186 MB file on two workers kept one of them busy for two (0.62 s against the
    folder's 0.44 s for the same bytes)."""
    jobs = max(1, jobs)
    n = max(2, jobs * -(-s.size // (jobs * RANGE_BYTES)))
    cuts = [0]
    for k in range(1, n):
        c = line_start_after(s.path, k * s.size // n)
        if c is not None and c > cuts[-1] and c < s.size:
            cuts.append(c)
    out = []
    for i, c in enumerate(cuts):
        end = cuts[i + 1] if i + 1 < len(cuts) else None
        out.append(_Task(s, c, end, i, len(cuts)))
    return out


def read_history(sources: list[SourceInfo], matcher: Matcher, on_source: Callable[[SourceHistory], None], *,
                 index: bool | str = False, partial_tail: bool = True, jobs: int | None = None, polite: bool = False,
                 io_timeout: float | None = IO_TIMEOUT_S, progress: ReadProgress | None = None,
                 unknown_only: bool = False, progress_steps: bool = False) -> None:
    """Read every source's history; ``on_source`` gets each source's result as it completes
    (its ranges joined), in the calling thread. ``index``: also build each file's line index
    (with each line's time when there are several sources to merge). ``progress_steps``: also
    count each rank log's steps and checkpoint saves (:attr:`SourceHistory.progress`, for scan's
    rhythm: :mod:`.progress_pass`)."""
    progress = progress if progress is not None else ReadProgress()
    progress.unknown_only = unknown_only
    progress.progress_steps = progress_steps
    progress.total = sum(s.size for s in sources)
    progress.sources = len(sources)
    n_jobs = jobs or (1 if polite else (os.cpu_count() or 1))
    parallel = n_jobs > 1 and progress.total >= PARALLEL_MIN_BYTES and (
        len(sources) > 1 or progress.total >= 2 * RANGE_BYTES)
    tasks = _plan(sources, n_jobs if parallel else 1)
    if index and len(sources) == 1:
        index = "lines"  # one source is merged with nothing: its index needs no times

    def out(h: SourceHistory) -> None:
        progress.finished_sources += 1
        on_source(h)

    from .historypool import run_pool, run_serial  # (here: it imports this module's tasks)

    joiner = _Joiner(out, matcher, index, partial_tail)
    try:
        if parallel:
            run_pool(tasks, matcher, joiner, n_jobs, index, partial_tail, polite, io_timeout, progress)
        else:
            run_serial(tasks, matcher, joiner, index, partial_tail, io_timeout, progress)
    finally:
        progress.ended = time.monotonic()


class _Joiner:
    """Ranges of one source, joined in order as they arrive; whole sources go straight out."""

    def __init__(self, out: Callable[[SourceHistory], None], matcher: Matcher, index: bool, partial_tail: bool):
        self.out = out
        self.matcher = matcher
        self.index = index
        self.partial_tail = partial_tail
        self.parts: dict[str, dict[int, tuple[_Task, SourceHistory]]] = {}

    def add(self, task: _Task, h: SourceHistory) -> None:
        h.processor.attach(self.matcher)
        if task.parts == 1:
            self.out(h)
            return
        got = self.parts.setdefault(task.info.path, {})
        got[task.part] = (task, h)
        if len(got) < task.parts:
            return
        del self.parts[task.info.path]
        acc = got[0][1]
        for i in range(1, task.parts):
            t, h2 = got[i]
            if open_at_end(acc.processor):
                # a report crosses the cut: read the range again, continuing acc's processor
                box: dict = {}
                for off, data in read_chunks(t.info.path, start=t.start, end=t.end,
                                             partial_tail=self.partial_tail and i == task.parts - 1, progress=box):
                    acc.processor.feed(data, off)
            else:
                absorb(acc.processor, h2.processor)
            # (re-read or not, the range's own count holds: a tracker joins across the cut)
            acc.progress = progress_pass.join(acc.progress, h2.progress)
            if acc.index is not None and h2.index is not None:
                join_index(acc.index, h2.index)
            acc.stop, acc.ident, acc.kind = h2.stop, h2.ident or acc.ident, h2.kind
            for e in h2.processor.errors:
                if e not in acc.processor.errors:
                    acc.processor.errors.append(e)
        self.out(acc)
