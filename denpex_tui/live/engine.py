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

from ._queue import ByteQueue
from .backlog import Backlog
from .dumps import DumpWatch, split_evidence
from .events import HistoryProgress
from .jobfeed import JobFeed
from .sources import Chunk, SourceEvent
from .stall import StallCleared, StallEvent

if TYPE_CHECKING:
    from .tailer import TailOptions

__all__ = ["Engine"]

TRIAGE_INTERVAL_S = 0.25
STALL_CHECK_S = 1.0
DUMP_CHECK_S = 3.0  # how often the job's folders are looked at for new Flight Recorder dumps
QUEUE_BYTES = 4 << 20  # chunk bytes waiting between the tailer and the parse thread
BATCH_BYTES = 2 << 20  # chunk bytes parsed per batch
HISTORY_PROGRESS_S = 0.25  # how often the history pass says how far it is


def _polite_thread() -> None:
    """nice +10 for the calling thread only (Linux applies setpriority to one thread id)."""
    try:
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


@dataclass(slots=True)
class _Pace:
    """When the loop last did its periodic work, and whether a re-triage is owed."""

    triage: float = 0.0
    stall: float = 0.0
    dumps: float = 0.0
    pending: bool = False


class Engine(JobFeed):
    """The live engine: the history pass, then the tailer's stream, fed to the ``JobFeed``
    in one parse thread; ``run()`` yields its events (live/events.py)."""

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
        super().__init__(catalog, keep_lines=keep_lines, history_done=from_end)
        # One parse thread (the GIL allows no more); next to a running job it is reniced like
        # the tailer's I/O threads, so following yields the cores to the training ranks.
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="denpex-parse",
                                        initializer=_polite_thread if polite else None)
        self._stopping = False
        self.backlog = None if from_end else Backlog(list(paths), self.matcher, index=index, polite=polite, jobs=jobs)
        from .proctable import ProcessTable
        from .tailer import TailOptions, Tailer

        opts = dataclasses.replace(tailer_options or TailOptions(), from_end=from_end, polite=polite)
        self.proctable = ProcessTable(job_processes(paths)) if processes else None
        # Flight Recorder dumps and RAS reports are evidence, not lines: never tailed
        log_paths, evidence = split_evidence(paths)
        self.dumps = DumpWatch(paths, evidence)
        self.tailer = Tailer(log_paths, execs or [], options=opts, proctable=self.proctable)

    def start_history(self) -> None:
        """Begin reading the history now, before ``run()`` (the app calls it as it is built, so
        the pass overlaps its start-up); ``run()`` then takes what was read, in order."""
        if self.backlog is not None and not self.history_done:
            self.backlog.start()

    # -- the loop -------------------------------------------------------------------------

    async def _history(self, loop) -> AsyncIterator[Any]:
        """Phase one: the files found at start, read by the history pass (its own thread, its
        own processes for a big job); each source's processor joins the job in the parse
        thread as it completes, with a diagnosis marked provisional until the last."""
        bl = self.backlog
        out: asyncio.Queue = asyncio.Queue()  # adopted sources' futures, and a wake-up at the end
        submitted = [0]  # counted in the history thread, before it says the pass ended
        received = 0

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
            submitted[0] += 1
            fut.add_done_callback(lambda f: post(out.put_nowait, f))

        task: asyncio.Future = loop.create_future()

        def done(exc: BaseException | None) -> None:  # the pass ended (in its thread, or here)
            if exc is None:
                post(lambda: task.done() or task.set_result(None))
            else:  # handed to the loop
                post(lambda e=exc: task.done() or task.set_exception(e))
            # wake the wait below now: the last source's diagnosis is final at once, not at the
            # next progress tick (up to HISTORY_PROGRESS_S later)
            post(out.put_nowait, None)

        bl.attach(adopt, done)  # the pass may have begun already (start_history)
        last = -1.0
        while True:
            try:
                f = await asyncio.wait_for(out.get(), timeout=HISTORY_PROGRESS_S)
                if f is not None:  # (None: the pass ended)
                    if f.exception() is not None:
                        raise f.exception()
                    received += 1
                    for ev in f.result():
                        yield ev
            except asyncio.TimeoutError:
                pass
            if self._stopping:
                return
            now = time.monotonic()
            if task.done() and out.empty() and received >= submitted[0]:
                break  # every source the pass read has joined (none still in the parse thread)
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
            if f is not None:
                for ev in f.result():
                    yield ev
        self.history_done = True
        self.tailer.start_at = bl.start_at()
        # every source read is in the job before the end is told: the summary that comes with
        # it (app/feed.py) counts them all (it said "4 sources" of 18 until the final triage)
        await loop.run_in_executor(self._pool, self._sync)
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
        pace = _Pace(stall=time.monotonic())
        try:
            while not self._stopping:
                try:
                    item = await asyncio.wait_for(queue.get(), timeout=TRIAGE_INTERVAL_S)
                except asyncio.TimeoutError:
                    item = None
                if item is done or self._stopping:
                    break
                batch, others, item = self._drain(queue, item, done)
                for ev in await self._step(loop, batch, others, pace):
                    yield ev
                if item is done or self._stopping:  # the tailer ended while a batch was drained
                    break
        finally:
            await self._stop_tailer(task)

    @staticmethod
    def _drain(queue: ByteQueue, item: Any, done: object) -> tuple[list[Chunk], list[Any], Any]:
        """One batch from the queue, starting with ``item``: chunks (up to 256 or
        ``BATCH_BYTES``) and the other items between them; the last item taken is returned
        (``done`` when the tailer ended)."""
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
        return batch, others, item

    async def _step(self, loop, batch: list[Chunk], others: list[Any], pace: _Pace) -> list[Any]:
        """Feed one batch in the parse thread, then the periodic work (quiet tracebacks,
        silences, dumps, the re-triage at most every ``TRIAGE_INTERVAL_S``); the events."""
        now = time.monotonic()
        run = loop.run_in_executor
        events: list[Any] = []
        for ev in others:
            if isinstance(ev, SourceEvent):
                await run(self._pool, self._source_event, ev)
                pace.pending = True
            elif getattr(ev, "state", None) in ("started", "exited"):
                pace.pending = pace.pending or ev.state == "exited"
            events.append(ev)
        if batch:
            events.extend(await run(self._pool, self._feed, batch, now))
            pace.pending = True
        closed = await run(self._pool, self._close_quiet, now)
        events.extend(closed)
        if closed or self._dirty:  # a closed report can change the job without a new finding key
            pace.pending = True
        if now - pace.stall >= STALL_CHECK_S:
            pace.stall = now
            for sev in self.stall.check(now):
                if isinstance(sev, StallEvent):
                    self.stalls[sev.rank] = sev.silent_s
                elif isinstance(sev, StallCleared):
                    self.stalls.pop(sev.rank, None)
                events.append(sev)
                pace.pending = True
        if now - pace.dumps >= DUMP_CHECK_S:
            pace.dumps = now
            if await run(self._pool, self.dumps.poll, self.job):
                pace.pending = True
        if pace.pending and now - pace.triage >= TRIAGE_INTERVAL_S:
            pace.triage = now
            pace.pending = False
            events.extend(await run(self._pool, self._retriage))
        return events

    async def _stop_tailer(self, task: asyncio.Task) -> None:
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
