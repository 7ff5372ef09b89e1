"""The live engine's parse-thread side: sources' processors, the job state, findings, triage.

``JobFeed`` is what ``Engine`` (live/engine.py) feeds in its one parse thread: chunks from
the tailer (``_feed``), sources whose history the history pass read (``_adopt``), source
events that start a new generation of a source (``_source_event``), quiet timers that close
tracebacks (``_close_quiet``), the end of a finished job (``finish``); it answers with
events (``FindingEvent``, ``IncidentEvent``, ``LinesEvent``).  No asyncio here.
"""

from __future__ import annotations

import os
import time
from typing import Any

from denpex_tui.core.catalog import Catalog
from denpex_tui.core.history import SourceHistory
from denpex_tui.core.job import JobState, ProcessorResult
from denpex_tui.core.lines.heads import label_kind, stream_labels
from denpex_tui.core.lines.facts import line_facts
from denpex_tui.core.lines.reader import MAX_LINE, read_tail
from denpex_tui.core.matcher import Matcher
from denpex_tui.core.model import Incident, SourceInfo, finding_key, incident_key
from denpex_tui.core.pipeline import SourceProcessor
from denpex_tui.core.sources import classify
from denpex_tui.core.triage import mark_provisional, triage

from .events import FindingEvent, IncidentEvent, LinesEvent, LogLine
from .sources import Chunk, SourceEvent
from .stall import StallDetector

__all__ = ["JobFeed", "QUIET_CLOSE_S"]

_KEEP_LINE_BYTES = 16 << 10
QUIET_CLOSE_S = 0.5  # a traceback with no new line for this long is complete


class JobFeed:
    """The parse thread's side of the live engine: one ``SourceProcessor`` per source (the very
    one ``scan`` uses), the ``JobState`` they fill, new findings as events (one per attempt,
    rank and signature), silence observations, the lines kept for a view, and the re-triage
    when something that matters changed.  Synchronous; every method runs in the engine's one
    parse thread (``Engine.call`` is the way in from outside)."""

    def __init__(self, catalog: Catalog, *, keep_lines: int = 0, history_done: bool = False) -> None:
        self.catalog = catalog
        self.matcher = Matcher(catalog)
        self.job = JobState()
        self.processors: dict[str, SourceProcessor] = {}
        self._generation: dict[str, int] = {}
        self._dirty: set[str] = set()
        self._last_feed: dict[str, float] = {}
        self._finished_at: dict[str, int] = {}  # source -> offset fed by finish() (its final partial line)
        self._incident_keys: dict[int, tuple] = {}
        self.incidents: list[Incident] = []
        self.stalls: dict[Any, float] = {}
        self.stall = StallDetector()
        self.keep_lines = keep_lines
        self._new: list[Any] = []
        self._emitted: set = set()
        self._order = 0
        self.history_done = history_done  # every file found at start is read to its end

    def _processor(self, chunk: Chunk) -> SourceProcessor:
        sid = chunk.source_id or chunk.path
        p = self.processors.get(sid)
        if p is not None and chunk.history and chunk.offset == 0 and p.bytes_read > 0:
            # the file changed after its history was read (read again from its start): a new
            # generation of the source, as after a rotation
            self._new_generation(sid)
            p = None
        if p is None:
            if chunk.kind == "exec":
                info = SourceInfo(path=chunk.path, kind="exec", exec_rank=chunk.rank, order=self._order)
            else:
                info = classify(chunk.path, self._order)
            self._order += 1
            p = SourceProcessor(info, self.matcher, on_finding=self._new.append)
            self.processors[sid] = p
        return p

    def _adopt(self, h: SourceHistory) -> list[Any]:
        """Runs in the parse thread: one source's history joins the job."""
        sid = os.path.abspath(h.info.path)
        h.info.order = self._order
        self._order += 1
        p = h.processor
        p.attach(self.matcher, self._new.append)
        self.processors[sid] = p
        self._new.extend(p.findings.values())
        self._dirty.add(sid)
        self._last_feed[sid] = time.monotonic()
        if p.blocks and self._quiet_since_written(p):
            p.close()  # a report at the end of a file nobody writes to any more is complete
        return self._take_new()  # triaged with the others at the next tick (not once per source)

    @staticmethod
    def _quiet_since_written(p: SourceProcessor) -> bool:
        """The file was last written more than QUIET_CLOSE_S ago and holds nothing unread."""
        try:
            st = os.stat(p.info.path)
        except OSError:
            return False
        return st.st_size <= p.bytes_read and time.time() - st.st_mtime >= QUIET_CLOSE_S

    def _feed(self, chunks: list[Chunk], now: float) -> list[Any]:
        """Runs in the parse thread. Returns the events to emit."""
        out: list[Any] = []
        lines_out: list[LogLine] = []
        for c in chunks:
            if self._finished_at and c.offset < self._finished_at.get(c.source_id or c.path, -1):
                continue  # finish() fed this final partial line already
            p = self._processor(c)
            if p.info.kind == "error-json":
                p.feed_error_json(c.data)
                p.bytes_read = max(p.bytes_read, c.offset + len(c.data))
            else:
                p.feed(c.data, c.offset, continues=c.continues)
            sid = c.source_id or c.path
            self._dirty.add(sid)
            self._last_feed[sid] = now
            if not c.history:
                self._observe_lines(p, c, now, lines_out)
        out.extend(self._take_new())
        if lines_out:
            out.append(LinesEvent(lines_out))
        return out

    def _observe_lines(self, p: SourceProcessor, c: Chunk, now: float, out: list[LogLine]) -> None:
        data = c.data
        info = p.info
        # Silence detection needs which rank streams spoke, not every line: per chunk.
        if info.kind != "console":
            rank = info.file_rank if info.file_rank is not None else info.exec_rank
            key = rank if rank is not None else (("local", info.node_key, info.local_rank)
                                                 if info.local_rank is not None else None)
            if key is not None:
                self.stall.observe(key, info.node_key, now)
        else:
            for label, n in stream_labels(data).items():
                key = ("local", info.node_key, n) if label_kind(label) == "local" else n
                self.stall.observe(key, info.node_key, now)
        if not self.keep_lines:
            return
        n_lines = data.count(b"\n")
        keep = min(self.keep_lines, n_lines)
        first_line = p.line_no - n_lines + 1
        start = 0
        skip = max(0, n_lines - keep)
        if skip:
            pos = len(data) - 1
            for _ in range(keep):
                pos = data.rfind(b"\n", 0, pos)
            start = pos + 1
        lineno = first_line + skip
        while start < len(data):
            nl = data.find(b"\n", start)
            # the view keeps a line's first 16 KiB (a 2 GB line costs 16 KiB)
            pre = line_facts(data[start:min(nl, start + _KEEP_LINE_BYTES)])
            rank, local = pre.ranks(info)
            out.append(LogLine(info.path, lineno, pre.raw_text, pre.spans, rank, local, info.node_key, now))
            lineno += 1
            start = nl + 1

    def _close_quiet(self, now: float) -> list[Any]:
        """Tracebacks whose stream went quiet are complete: close them."""
        for sid, p in self.processors.items():
            if p.blocks and now - self._last_feed.get(sid, now) >= QUIET_CLOSE_S and not self._waiting(p):
                p.close()
                self._dirty.add(sid)
        return self._take_new()

    @staticmethod
    def _waiting(p: SourceProcessor) -> bool:
        """The file holds bytes the processor has not had yet (the follower is behind): its
        stream is not quiet, whatever the clock says."""
        if p.info.kind == "exec":
            return False
        try:
            return os.stat(p.info.path).st_size > p.bytes_read
        except OSError:
            return False

    def finish(self) -> list[Any]:
        """A finished job (no line will come): close every open traceback and report now, as
        the end of a file does in ``scan``, and re-triage. Run through ``call``. What the live
        engine would only conclude after its quiet timers, independent of how busy the machine is."""
        for sid, p in self.processors.items():
            self._final_partial(sid, p)
            p.close()
            self._dirty.add(sid)
        return [*self._take_new(), *self._retriage()]

    def _final_partial(self, sid: str, p: SourceProcessor) -> None:
        """A finished file's last line that never got its newline (a tqdm bar redrawn with carriage
        returns by a rank that was killed): fed now, as the end of a file is in ``scan``; the
        follower's own copy of it, if it comes later, is dropped."""
        if p.info.kind in ("exec", "error-json"):
            return
        try:
            size = os.stat(p.info.path).st_size
        except OSError:
            return
        if size <= p.bytes_read or size - p.bytes_read > MAX_LINE:
            return
        tail = read_tail(p.info.path, size, size - p.bytes_read)
        if not tail or b"\n" in tail:  # whole lines still on their way: the follower's to deliver
            return
        p.feed(tail + b"\n", p.bytes_read)
        self._finished_at[sid] = size

    def _take_new(self) -> list[FindingEvent]:
        """New findings as events: one per (attempt, rank, signature), whichever copy of the
        line (console, per-rank file, error.json) arrived first."""
        out = []
        if not self._new:
            return out
        names = self.job.node_names()
        rr = self.job.resolver()
        for f in self._new:
            if f.rank is None and f.local_rank is not None:
                f.rank = rr.global_of(f.node_key, f.local_rank)
            if f.node is None and f.node_key is not None:
                f.node = names.get(f.node_key, f.node_key)
            key = finding_key(f)
            if key in self._emitted:
                continue
            self._emitted.add(key)
            out.append(FindingEvent(f))
        self._new.clear()
        return out

    def _sync(self) -> None:
        """The job takes the sources that changed since it last did (in the parse thread)."""
        for sid in self._dirty:
            p = self.processors.get(sid)
            if p is not None:
                key = f"{p.info.path}#{self._generation.get(sid, 0)}"
                self.job.results[key] = ProcessorResult.of(p)
        self._dirty.clear()
        self.job.changed()

    def _retriage(self) -> list[Any]:
        self._sync()
        stalls = {k: v for k, v in self.stalls.items() if isinstance(k, int)}
        incidents = triage(self.job, self.catalog, read_tail=read_tail, extra_stalls=stalls or None)
        if not self.history_done:
            mark_provisional(incidents)
        out: list[Any] = []
        for inc in incidents:
            k = incident_key(inc)
            if self._incident_keys.get(inc.attempt) != k:
                self._incident_keys[inc.attempt] = k
                out.append(IncidentEvent(inc, incidents))
        self.incidents = incidents
        return out

    def _new_generation(self, sid: str) -> None:
        p = self.processors.pop(sid, None)
        if p is not None:
            p.close()
            gen = self._generation.get(sid, 0)
            self.job.results[f"{p.info.path}#{gen}"] = ProcessorResult.of(p)
            self._generation[sid] = gen + 1

    def _source_event(self, ev: SourceEvent) -> None:
        if ev.state in ("rotated", "truncated", "replaced", "possibly-lost"):
            # Lines now restart at 1 in a new generation of the source; the old
            # generation's findings stay in the job.
            self._new_generation(ev.source_id or ev.path)

    def rank_of(self, key: Any) -> int | None:
        """A stall key (a global rank, or ("local", node_key, local)) as a global rank."""
        if isinstance(key, int) or key is None:
            return key
        if isinstance(key, tuple) and len(key) == 3 and key[0] == "local":
            return self.job.resolver().global_of(key[1], key[2])
        return None

    def node_name(self, node_key: str | None) -> str | None:
        if node_key is None:
            return None
        return self.job.node_names().get(node_key, node_key)
