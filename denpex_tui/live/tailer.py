"""The asyncio-facing tailer: follows files, directories, globs and commands.

    tailer = Tailer(["logs/", "run/*.out"], ["3=kubectl logs -f pod-3"], options=TailOptions(from_end=True))
    async for item in tailer.run():      # Chunk | SourceEvent | ProcessEvent
        ...
    tailer.stop()                        # from anywhere (thread-safe); run() then ends

The tailer owns the sources (``FileFollower``, ``DirWatch``, ``ExecSource``), the output
queue, inotify and the producers; when each source is polled is its ``PollScheduler``'s
(live/scheduler.py), the threads, lanes and budgets are in live/pollwork.py.

Inotify is a speed-up only: a change wakes the poll of its file at once (events are
coalesced for 10 ms under heavy writing); an overflow re-polls everything.  Command
sources and the process table are producers pumped into the same queue.

Memory: at most ``max_buffered`` bytes (8 MiB) of chunks wait for the consumer; when
the consumer is slower, polling pauses (the data waits in the files).
"""

from __future__ import annotations

import asyncio
import collections
import os
import threading
from dataclasses import dataclass
from typing import Any, Iterable

from denpex_tui.probes.mounts import MountTable

from ._fsinfo import CTO_FS, NAME_EVENTS, Inotify
from ..core.heap import big_buffers_unmapped
from .dirwatch import DirWatch, expand_spec
from .filecap import FileCap
from .follower import FileFollower
from .pollwork import WorkerPool
from .scheduler import PollScheduler
from .sources import Chunk, PollResult, SourceEvent

__all__ = ["Tailer", "TailOptions", "TailStream"]


@dataclass
class TailOptions:
    """How a ``Tailer`` follows (every field optional; the module docstring has the rules).

    ``from_end``       start at the end of files present at start-up (no history).
    ``history``        tag the start-up content of files as ``Chunk.history`` (default).
    ``poll_min``/``poll_quiet_min``/``poll_max``/``poll_max_watched``  per-file
                       polling interval bounds.
    ``tick``           smallest dispatch period of timer-driven polls.
    ``dir_poll_min``/``dir_poll_max``  directory stat interval bounds.
    ``max_meta_per_s`` metadata calls per second cap (None: no cap).  Default 500.
    ``workers``        threads doing I/O at once (plus up to ``max_hung`` written-off
                       threads stuck on dead mounts).
    ``call_timeout``   seconds before a blocking call marks its filesystem hung.
    ``polite``         nice +10 for the I/O threads and one history batch at a time.
    ``inotify``        use inotify as a speed-up where available (default True).
    ``max_buffered``   bytes of undelivered chunks before polling pauses.
    ``batch_bytes``/``max_batch``  bytes and polls of one batch at most.
    ``max_files``      cap on followed files (an ``error`` event says when reached).
    """

    from_end: bool = False
    history: bool = True
    poll_min: float = 0.05
    poll_quiet_min: float = 0.1
    poll_max: float = 2.0
    poll_max_watched: float = 10.0
    dir_poll_min: float = 1.0
    dir_poll_max: float = 10.0
    max_meta_per_s: float | None = 500.0
    workers: int = 4
    max_hung: int = 8
    call_timeout: float = 5.0
    polite: bool = True
    inotify: bool = True
    max_buffered: int = 8 << 20
    batch_bytes: int = 4 << 20
    max_batch: int = 512
    tick: float = 0.05
    max_files: int = 10000

    def __post_init__(self) -> None:
        self.poll_quiet_min = min(self.poll_quiet_min, self.poll_max)
        self.poll_max_watched = max(self.poll_max, self.poll_max_watched)
        self.workers = max(1, self.workers)


class TailStream:
    """The iterator returned by ``Tailer.run()`` (cancellation-safe ``__anext__``)."""

    def __init__(self, tailer: "Tailer") -> None:
        self._t = tailer

    def __aiter__(self) -> "TailStream":
        return self

    async def __anext__(self) -> Any:
        t = self._t
        if not t._started:
            t._start()
        while True:
            if t._q and not t._stopping:
                return t._pop()
            if t._stopping:
                if t._shutdown_task is not None:
                    await asyncio.shield(t._shutdown_task)
                else:
                    await t._shutdown()
                raise StopAsyncIteration
            fut = t._loop.create_future()
            t._consumer_fut = fut
            try:
                await fut
            finally:
                if t._consumer_fut is fut:
                    t._consumer_fut = None

    async def aclose(self) -> None:
        self._t.stop()
        if self._t._started:
            if self._t._shutdown_task is not None:
                await asyncio.shield(self._t._shutdown_task)
            else:
                await self._t._shutdown()




class Tailer:
    """Follow paths (files, directories, globs) and ``--exec`` commands.

    ``paths``      file paths, directories (recursive, log-looking names only) or
                   globs (``**`` allowed); re-evaluated while running.
    ``execs``      ``--exec`` specs (``'cmd'`` or ``'3=cmd'``), see execsource.py.
    ``options``    a ``TailOptions`` (how to poll, budgets, caps).
    ``proctable``  an optional ``ProcessTable``; its events join the stream.
    ``mounts``     the mount table (tests give a simulated one).
    """

    def __init__(
        self,
        paths: Iterable[str] = (),
        execs: Iterable[str] = (),
        *,
        options: TailOptions | None = None,
        proctable: Any = None,
        mounts: MountTable | None = None,
    ) -> None:
        big_buffers_unmapped()  # a huge line must not leave the heaps fragmented (see core.heap)
        self.opts = o = options or TailOptions()
        self.specs = [expand_spec(p) for p in paths]
        self.exec_specs = list(execs)
        self.start = "end" if o.from_end else "begin"
        self.proctable = proctable
        self.mounts = mounts or MountTable()
        self.followers: dict[str, FileFollower] = {}
        self.dirs: dict[str, DirWatch] = {}
        # abs path -> ((dev, ino), offset): files whose history the history pass read already
        self.start_at: dict[str, tuple] = {}
        self.stats = collections.Counter()
        self.sched = PollScheduler(self)
        self._q: collections.deque = collections.deque()
        self._buffered = 0
        self._stopping = False
        self._started = False
        self._stream: TailStream | None = None
        self._shut = False
        self._shutdown_task: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._consumer_fut: asyncio.Future | None = None
        self._room_fut: asyncio.Future | None = None
        self._tasks: list[asyncio.Task] = []
        self._pool: WorkerPool | None = None
        self._ino: Inotify | None = None
        self._ino_paused = False
        self._cap = FileCap(o.max_files)  # live/filecap.py: what counts, what is left out, said
        self._cap_flush: asyncio.TimerHandle | None = None
        self._execs: list = []

    # -- public API -------------------------------------------------------------
    def add_path(self, text: str) -> None:
        """Add a path/dir/glob while running (or before)."""
        spec = expand_spec(text)
        if self._started:
            self._add_spec(spec)
        else:
            self.specs.append(spec)

    def stop(self) -> None:
        """Stop following (thread-safe, idempotent).  ``run()`` returns soon after."""
        self._stopping = True
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            if threading.get_ident() == getattr(self, "_loop_thread", None):
                self._wake_all()
            else:
                loop.call_soon_threadsafe(self._wake_all)
        except RuntimeError:
            pass

    def metadata_calls(self) -> int:
        return self.sched.bucket.spent

    def run(self) -> "TailStream":
        """Async iterator of ``Chunk``, ``SourceEvent`` (and ``ProcessEvent``) items.

        ``async for item in tailer.run(): ...`` ends after ``stop()``.  Unlike an async
        generator, the iterator survives a cancelled ``__anext__`` (e.g. under
        ``asyncio.wait_for``): nothing is lost, the next call returns the next item.
        Leaving the loop early does not stop the tailer: call ``stop()`` (or
        ``await stream.aclose()``).
        """
        if self._stream is not None:
            raise RuntimeError("Tailer.run() can be called once")
        self._stream = TailStream(self)
        return self._stream

    def _start(self) -> None:
        self._started = True
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._pool = WorkerPool(self.opts.workers + self.opts.max_hung, self.opts.polite)
        if self.opts.inotify:
            try:
                self._ino = Inotify()
                self._loop.add_reader(self._ino.fd, self._on_inotify)
            except (OSError, AttributeError, NotImplementedError):
                self._ino = None
        for spec in self.specs:
            self._add_spec(spec)
        for e in self.exec_specs:
            self._start_exec(e)
        self._tasks.append(asyncio.ensure_future(self.sched.run()))
        self._tasks.append(asyncio.ensure_future(self.sched.watchdog()))
        if self.proctable is not None:
            self._tasks.append(asyncio.ensure_future(self._pump(self.proctable.run())))

    def _pop(self) -> Any:
        item = self._q.popleft()
        if isinstance(item, Chunk):
            self._buffered -= len(item.data)
            if self._buffered < self.opts.max_buffered // 2:
                self.sched.kick()
                self._room()
        return item

    # -- sources ----------------------------------------------------------------
    def _add_spec(self, spec) -> None:
        if spec.kind == "glob":
            d = DirWatch(spec.root, spec, (), "glob", root=True, startup=True, inotify=self._ino)
        elif spec.kind == "dir":
            d = DirWatch(spec.root, spec, (), "all", root=True, startup=True, inotify=self._ino)
        else:
            d = DirWatch(spec.root, spec, (), "all", root=True, startup=True, inotify=self._ino)
        key = "dir:" + os.path.abspath(d.path) + "|" + spec.text
        d.source_id = key
        if key in self.dirs:
            return
        self.dirs[key] = d
        self.sched.setup(d, "dir")
        self.sched.enqueue(d, urgent=True)

    def _add_dir(self, d: DirWatch) -> None:
        key = "dir:" + os.path.abspath(d.path) + "|" + d.spec.text
        if key in self.dirs:
            return
        if len(self.dirs) >= 2 * self.opts.max_files + 64:  # torchrun: a folder per rank and attempt
            self._cap.left_dirs += 1
            self._report_cap(d.path)
            return
        d.source_id = key
        self.dirs[key] = d
        self.sched.setup(d, "dir")
        self.sched.enqueue(d, urgent=True)

    def _add_file(self, path: str, history_only: bool, startup: bool, explicit: bool, link: str = "") -> None:
        sid = os.path.abspath(path)
        if sid in self.followers:
            return
        ok, victim = self._cap.admit(path, self.followers)
        if victim is not None:
            self._remove(victim)
        if not ok or victim is not None:
            self._report_cap(path)
        if not ok:
            return
        at = self.start_at.get(sid) if startup else None
        if at is not None and (history_only or at[1] < 0):
            return  # a rotated copy (or UTF-16): its whole history was read, it is not followed
        mount, fstype = self.mounts.lookup(path)
        f = FileFollower(
            path,
            source_id=sid,
            start="at" if at is not None else (self.start if startup else "begin"),
            at=at,
            history=self.opts.history and startup,
            startup=startup,
            explicit=explicit,
            history_only=history_only,
            cto=fstype in CTO_FS,
            inotify=self._ino,
            link_outside=link,
        )
        self.followers[sid] = f
        self.sched.setup(f, "file")
        self.sched.enqueue(f, urgent=True)

    def _report_cap(self, path: str, force: bool = False) -> None:
        msg = self._cap.report(force=force)
        if msg:
            self._put(SourceEvent(path, "error", msg, "cap:max-files"))
        elif self._cap.pending and self._cap_flush is None and self._loop is not None:
            def flush() -> None:
                self._cap_flush = None
                self._report_cap(path, force=True)

            self._cap_flush = self._loop.call_later(2.0, flush)

    def _remove(self, p) -> None:
        p.removed = True
        if isinstance(p, FileFollower):
            if self.followers.get(p.source_id) is p:
                del self.followers[p.source_id]
        else:
            if self.dirs.get(p.source_id) is p:
                del self.dirs[p.source_id]
        if self._pool is not None:
            self._pool.submit(p.close)

    # -- scheduling ---------------------------------------------------------------
    def _room(self) -> None:
        f = self._room_fut
        if f is not None and not f.done():
            f.set_result(None)

    def _wake_all(self) -> None:
        # clean up even if nobody iterates again (e.g. the consumer task was cancelled):
        # exec commands are killed, tasks cancelled, files closed
        if self._started and self._shutdown_task is None and self._loop is not None and not self._loop.is_closed():
            self._shutdown_task = self._loop.create_task(self._shutdown())
        self.sched.kick()
        self._room()
        f = self._consumer_fut
        if f is not None and not f.done():
            f.set_result(None)

    def _put(self, item) -> None:
        self._q.append(item)
        if isinstance(item, Chunk):
            self._buffered += len(item.data)
            self.stats["chunks"] += 1
            self.stats["bytes"] += len(item.data)
        else:
            self.stats["events"] += 1
        f = self._consumer_fut
        if f is not None and not f.done():
            f.set_result(None)


    def _deliver(self, p, r: PollResult) -> bool:
        """A poll's result: its items go out, the files and directories a listing found
        are added.  Returns False when the pollable is done (and removed)."""
        for item in r.items:
            self._put(item)
        for path, hist_only, startup, explicit, link in r.discovered:
            f = self.followers.get(os.path.abspath(path))
            if f is None:
                self._add_file(path, hist_only, startup, explicit, link)
            elif f.cur is None or f.awaiting_since is not None:
                # the listing shows a file at a name whose follower lost it: look now
                f.force_name_check = True
                self.sched.enqueue(f, urgent=True)
        for d in r.new_dirs:
            self._add_dir(d)
        if r.done:
            self._remove(p)
            return False
        return True

    def _on_inotify(self) -> None:
        ino = self._ino
        if ino is None:
            return
        events, overflow = ino.read()
        for owner, mask in events:
            if getattr(owner, "removed", True):
                continue
            if mask & NAME_EVENTS:
                owner.force_name_check = True
            if not isinstance(owner, FileFollower):
                owner.force = True
            self.sched.enqueue(owner, kick=True)
        if overflow:
            for p in list(self.followers.values()) + list(self.dirs.values()):
                self.sched.enqueue(p)
        # rate-limit wake-ups under heavy writing: events are coalesced for 10 ms
        if events and not self._ino_paused and self._loop is not None:
            self._ino_paused = True
            self._loop.remove_reader(ino.fd)
            self._loop.call_later(0.01, self._resume_inotify)

    def _resume_inotify(self) -> None:
        self._ino_paused = False
        if self._ino is not None and not self._stopping and self._loop is not None:
            self._loop.add_reader(self._ino.fd, self._on_inotify)
            self._on_inotify()

    # -- exec sources and other producers --------------------------------------------
    def _start_exec(self, spec: str) -> None:
        from .execsource import ExecSource, parse_exec_spec

        rank, cmd = parse_exec_spec(spec)
        src = ExecSource(cmd, rank, source_id=f"exec:{len(self._execs)}")
        self._execs.append(src)
        self._tasks.append(asyncio.ensure_future(self._pump(src.run())))

    async def _pump(self, agen) -> None:
        try:
            async for item in agen:
                if self._stopping:
                    break
                self._put(item)
                while self._buffered >= self.opts.max_buffered and not self._stopping:
                    self._room_fut = self._loop.create_future()
                    await self._room_fut
                    self._room_fut = None
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001
            self._put(SourceEvent("<producer>", "error", f"internal error: {e!r}"))
        finally:
            aclose = getattr(agen, "aclose", None)
            if aclose is not None:
                try:
                    await aclose()
                except Exception:
                    pass

    async def _shutdown(self) -> None:
        if self._shut:
            return
        self._shut = True
        self._stopping = True
        for src in self._execs:
            try:
                await src.stop()
            except Exception:
                pass
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass
        self._tasks.clear()
        if self._ino is not None and self._loop is not None:
            try:
                self._loop.remove_reader(self._ino.fd)
            except Exception:
                pass
        pool = self._pool
        if pool is not None:
            items = list(self.followers.values()) + list(self.dirs.values())
            for p in items:
                if not p.inflight:
                    pool.submit(p.close)
            if self._ino is not None:
                pool.submit(self._ino.close)
            pool.shutdown()
        self._ino = None
