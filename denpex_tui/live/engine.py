"""The live engine: the same pipeline as ``scan``, fed incrementally.

``Tailer`` (files, directories, globs, ``--exec`` commands, the process table) yields whole-line
chunks and source/process events; each source has a :class:`SourceProcessor` (the very one
``scan`` uses); findings are merged in a :class:`JobState` and triaged again when something
that matters changed. The engine yields events, in order:

* ``FindingEvent``   a new finding, as soon as its line (or its traceback) is complete;
* ``IncidentEvent``  each time the diagnosis changes (initiating rank, signature, collateral,
  confidence);
* ``SourceEvent`` / ``ProcessEvent`` from the tailer;
* ``StallEvent`` / ``StallCleared`` from the silence detector (live lines only);
* ``LinesEvent``     (only with ``keep_lines``) new lines for a log view.

Parsing runs in one worker thread, never on the event loop: a big history chunk never
freezes the loop (or the TUI). Memory is bounded: findings are aggregated, line buffers are
rings.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, AsyncIterator

from denpex_tui.core.catalog import Catalog
from denpex_tui.core.history import SourceHistory
from denpex_tui.core.job import JobState, ProcessorResult
from denpex_tui.core.lines.chunk import label_kind, stream_labels
from denpex_tui.core.lines.facts import line_facts
from denpex_tui.core.lines.reader import MAX_LINE, read_tail
from denpex_tui.core.matcher import Matcher
from denpex_tui.core.model import Finding, Incident, SourceInfo, finding_key, incident_key
from denpex_tui.core.pipeline import SourceProcessor
from denpex_tui.core.sources import classify
from denpex_tui.core.triage import mark_provisional, rank_ranges, triage

from ._queue import ByteQueue
from .backlog import Backlog, HistoryDone, HistoryProgress
from .dumps import DumpWatch, split_evidence
from .sources import Chunk, SourceEvent
from .stall import StallCleared, StallDetector, StallEvent

if TYPE_CHECKING:
    from .tailer import TailOptions

__all__ = ["Engine", "FindingEvent", "IncidentEvent", "LinesEvent", "LogLine", "HistoryProgress", "HistoryDone"]

TRIAGE_INTERVAL_S = 0.25
_MAX_EVENT_COLLATERAL = 20
_KEEP_LINE_BYTES = 16 << 10
STALL_CHECK_S = 1.0
DUMP_CHECK_S = 3.0  # how often the job's folders are looked at for new Flight Recorder dumps
QUEUE_BYTES = 4 << 20  # chunk bytes waiting between the tailer and the parse thread
BATCH_BYTES = 2 << 20  # chunk bytes parsed per batch
QUIET_CLOSE_S = 0.5  # a traceback with no new line for this long is complete
HISTORY_PROGRESS_S = 0.25  # how often the history pass says how far it is


@dataclass(slots=True)
class FindingEvent:
    finding: Finding

    def to_dict(self) -> dict[str, Any]:
        return {"event": "finding", **self.finding.to_json()}


@dataclass(slots=True)
class IncidentEvent:
    incident: Incident
    incidents: list[Incident]

    def to_dict(self) -> dict[str, Any]:
        """A bounded incident: the first collateral entries in full, all of them folded into
        rank ranges per signature (10 000 collateral ranks stay a few lines of JSON).
        ``provisional``: decided before the history was read to its end."""
        d = self.incident.to_json()
        for key, lst in (("collateral", self.incident.collateral), ("same_cause", self.incident.same_cause)):
            if len(lst) > _MAX_EVENT_COLLATERAL:
                folded: dict[str, list] = {}
                for c in lst:
                    folded.setdefault(c.signature, []).append(c.rank)
                d[key] = d[key][:_MAX_EVENT_COLLATERAL]
                d[f"{key}_folded"] = [{"signature": k, "ranks": rank_ranges(v), "count": len(v)}
                                      for k, v in folded.items()]
                d[f"{key}_total"] = len(lst)
        return {"event": "incident", **d}


@dataclass(slots=True)
class LogLine:
    source: str
    line: int
    text: str
    spans: tuple
    rank: int | None
    local: int | None
    node_key: str | None
    arrival: float


@dataclass(slots=True)
class LinesEvent:
    lines: list[LogLine]
    history: bool = False  # lines that were in the files before following began


def _polite_thread() -> None:
    """nice +10 for the calling thread only (Linux applies setpriority to one thread id)."""
    try:
        import threading

        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
    except (AttributeError, OSError):
        pass


def job_processes(paths: list[str]):
    """The process table's finder: training processes tied to the job's folders and files
    (cwd, an open log file, ``--log-dir``, the command line; a tied launcher's workers), as the
    probes match them; another job's workers on the node are not this job's ranks."""

    def find() -> list:
        from denpex_tui.probes.jobtie import tie_to_job
        from denpex_tui.probes.processes import find_training_processes

        ours, _others = tie_to_job(find_training_processes(), paths)
        return [t.process for t in ours]

    return find


class Engine:
    def __init__(
        self,
        paths: list[str],
        catalog: Catalog,
        *,
        execs: list[str] | None = None,
        from_end: bool = False,
        processes: bool = True,
        polite: bool = True,
        keep_lines: int = 0,
        index: bool = False,
        jobs: int | None = None,
        tailer_options: TailOptions | None = None,
    ):
        """``keep_lines``: live lines are sent as ``LinesEvent`` (at most this many of one
        chunk; 0: none). ``index``: the history pass also builds each file's line index for the
        view (sent with :class:`HistoryDone`). ``from_end``: no history, only what comes next."""
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
        self.from_end = from_end
        # One parse thread (the GIL allows no more); next to a running job it is reniced like
        # the tailer's I/O threads, so following yields the cores to the training ranks.
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="denpex-parse",
                                        initializer=_polite_thread if polite else None)
        self._new: list[Any] = []
        self._stopping = False
        self._emitted: set = set()
        self._order = 0
        self.backlog = None if from_end else Backlog(list(paths), self.matcher, index=index, polite=polite, jobs=jobs)
        self.history_done = from_end  # every file found at start is read to its end
        from .proctable import ProcessTable
        from .tailer import TailOptions, Tailer

        opts = dataclasses.replace(tailer_options or TailOptions(), from_end=from_end, polite=polite)
        self.proctable = ProcessTable(job_processes(paths)) if processes else None
        # Flight Recorder dumps and RAS reports are evidence, not lines: never tailed
        log_paths, evidence = split_evidence(paths)
        self.dumps = DumpWatch(paths, evidence)
        self.tailer = Tailer(log_paths, execs or [], options=opts, proctable=self.proctable)

    # -- processing (worker thread) -------------------------------------------------------

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

    def unread_bytes(self) -> int:
        """Bytes of the followed files not parsed yet (run through ``call``): 0 once the
        history of every file found so far is in the job state."""
        read: dict[str, int] = {}
        for p in self.processors.values():
            path = os.path.abspath(p.info.path)  # the tailer's followers are keyed by absolute path
            read[path] = max(read.get(path, 0), p.bytes_read)
        left = 0
        for path in list(getattr(self.tailer, "followers", {})):
            try:
                size = os.stat(path).st_size
            except OSError:
                continue
            left += max(0, size - read.get(path, 0))
        return left

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

    def _retriage(self) -> list[Any]:
        for sid in self._dirty:
            p = self.processors.get(sid)
            if p is not None:
                key = f"{p.info.path}#{self._generation.get(sid, 0)}"
                self.job.results[key] = ProcessorResult.of(p)
        self._dirty.clear()
        self.job.changed()
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

    # -- the loop -------------------------------------------------------------------------

    async def _history(self, loop) -> AsyncIterator[Any]:
        """Phase one: the files found at start, read by the history pass (its own thread, its
        own processes for a big job); each source's processor joins the job in the parse
        thread as it completes, with a diagnosis marked provisional until the last."""
        bl = self.backlog
        out: asyncio.Queue = asyncio.Queue()

        def post(fn, *args) -> None:
            try:
                loop.call_soon_threadsafe(fn, *args)
            except RuntimeError:  # the loop is gone: the app quit while the history was read
                bl.progress.cancel()

        def adopt(h: SourceHistory) -> None:  # in the history thread
            if self._stopping:
                return
            try:
                fut = self._pool.submit(self._adopt, h)
            except RuntimeError:  # stopped meanwhile
                return
            fut.add_done_callback(lambda f: post(out.put_nowait, f))

        task: asyncio.Future = loop.create_future()

        def run() -> None:  # a daemon thread: quitting never waits for the pass
            try:
                bl.run(adopt)
                post(lambda: task.done() or task.set_result(None))
            except BaseException as exc:  # handed to the loop
                post(lambda e=exc: task.done() or task.set_exception(e))

        threading.Thread(target=run, name="denpex-history", daemon=True).start()
        last = -1.0
        while True:
            try:
                f = await asyncio.wait_for(out.get(), timeout=HISTORY_PROGRESS_S)
                if f.exception() is None:
                    for ev in f.result():
                        yield ev
                else:
                    raise f.exception()
            except asyncio.TimeoutError:
                pass
            if self._stopping:
                return
            now = time.monotonic()
            if task.done() and out.empty():
                break
            if now - last >= HISTORY_PROGRESS_S:
                last = now
                pr = bl.progress
                yield HistoryProgress(pr.read(), pr.total, pr.finished_sources, pr.sources)
                if self._dirty:  # the sources read so far, triaged together: a diagnosis "so far"
                    for ev in await loop.run_in_executor(self._pool, self._retriage):
                        yield ev
        await task  # raises what the pass raised
        while not out.empty():
            f = out.get_nowait()
            for ev in f.result():
                yield ev
        self.history_done = True
        self.tailer.start_at = bl.start_at()
        done = bl.done()
        yield done
        for ev in await loop.run_in_executor(self._pool, self._retriage_all):
            yield ev

    def _retriage_all(self) -> list[Any]:
        self._incident_keys.clear()  # the final diagnosis is said again, no longer provisional
        return self._retriage()

    async def run(self) -> AsyncIterator[Any]:
        loop = asyncio.get_running_loop()
        if self.backlog is not None and not self.history_done:
            async for ev in self._history(loop):
                yield ev
            if self._stopping:
                self._pool.shutdown(wait=False, cancel_futures=True)
                return
        queue = ByteQueue(max_bytes=QUEUE_BYTES)  # bounded in bytes: one huge line is 1 MiB pieces
        done = object()

        async def pump() -> None:
            try:
                async for item in self.tailer.run():
                    await queue.put(item)
            finally:
                if not self._stopping:  # stopping: nobody drains the queue, and run() sees the flag
                    await queue.put(done)

        task = asyncio.create_task(pump())
        last_triage = 0.0
        last_stall = time.monotonic()
        last_dumps = 0.0
        pending_triage = False
        try:
            while True:
                if self._stopping:
                    break
                try:
                    item = await asyncio.wait_for(queue.get(), timeout=TRIAGE_INTERVAL_S)
                except asyncio.TimeoutError:
                    item = None
                if item is done or self._stopping:
                    break
                batch: list[Chunk] = []
                others: list[Any] = []
                batch_bytes = 0
                while item is not None and item is not done:
                    if isinstance(item, Chunk):
                        batch.append(item)
                        batch_bytes += len(item.data)
                    else:
                        others.append(item)
                    if len(batch) >= 256 or batch_bytes >= BATCH_BYTES or queue.empty():
                        break
                    item = queue.get_nowait()
                now = time.monotonic()
                events: list[Any] = []
                for ev in others:
                    if isinstance(ev, SourceEvent):
                        await loop.run_in_executor(self._pool, self._source_event, ev)
                        pending_triage = True
                    elif getattr(ev, "state", None) in ("started", "exited"):
                        pending_triage = pending_triage or ev.state == "exited"
                    events.append(ev)
                if batch:
                    evs = await loop.run_in_executor(self._pool, self._feed, batch, now)
                    events.extend(evs)
                    pending_triage = True
                closed = await loop.run_in_executor(self._pool, self._close_quiet, now)
                events.extend(closed)
                if closed or self._dirty:  # a closed report can change the job without a new finding key
                    pending_triage = True
                if now - last_stall >= STALL_CHECK_S:
                    last_stall = now
                    for sev in self.stall.check(now):
                        if isinstance(sev, StallEvent):
                            self.stalls[sev.rank] = sev.silent_s
                        elif isinstance(sev, StallCleared):
                            self.stalls.pop(sev.rank, None)
                        events.append(sev)
                        pending_triage = True
                if now - last_dumps >= DUMP_CHECK_S:
                    last_dumps = now
                    if await loop.run_in_executor(self._pool, self.dumps.poll, self.job):
                        pending_triage = True
                if pending_triage and now - last_triage >= TRIAGE_INTERVAL_S:
                    last_triage = now
                    pending_triage = False
                    events.extend(await loop.run_in_executor(self._pool, self._retriage))
                for ev in events:
                    yield ev
                if item is done or self._stopping:  # the tailer ended while a batch was drained
                    break
        finally:
            self.tailer.stop()
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
            # the tailer's own clean-up (--exec groups stopped, pipes closed) must end while the
            # loop still runs, or a busy command's pipe is finalised on a closed loop
            shutdown = getattr(self.tailer, "_shutdown_task", None)
            if shutdown is not None and not shutdown.done():
                try:
                    await asyncio.wait_for(asyncio.shield(shutdown), 6.0)
                except (asyncio.TimeoutError, asyncio.CancelledError, Exception):
                    pass
            self._pool.shutdown(wait=False, cancel_futures=True)

    def stop(self) -> None:
        """Stop following; what is still queued is dropped (a busy --exec can have 4 MiB of
        lines waiting: parsing them would delay the exit by seconds), and so is the history
        still being read."""
        self._stopping = True
        if self.backlog is not None:
            self.backlog.progress.cancel()
        self.tailer.stop()

    async def call(self, fn, *args):
        """Run ``fn(*args)`` in the parse thread, between two batches: the one safe way for a
        consumer (the TUI) to read ``job``/``processors`` while ``run()`` is going."""
        try:
            fut = asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)
        except RuntimeError:  # the pool is shut down: the engine stopped, nothing mutates now
            return fn(*args)
        return await fut

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
