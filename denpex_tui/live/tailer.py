"""The asyncio-facing tailer: follows files, directories, globs and commands.

    tailer = Tailer(["logs/", "run/*.out"], execs=["3=kubectl logs -f pod-3"])
    async for item in tailer.run():      # Chunk | SourceEvent | ProcessEvent
        ...
    tailer.stop()                        # from anywhere (thread-safe); run() then ends

Polling (docs/live-engine.md has the full story and the measured figures)
---------------------------------------------------------------------------
* Each followed file is a ``FileFollower`` polled with ``fstat`` on its open fd:
  ``poll_min`` (50 ms) after a poll that produced data, doubling per quiet poll up to
  the quiet interval ``clamp(N * 1.25 / (0.8 * max_meta_per_s), poll_quiet_min,
  poll_max)`` for N polled files (0.2 s for 64 files, 2 s for 1024 at the default
  cap).  The name is ``stat``'ed every 4th quiet poll to catch rotation/deletion.
* inotify is only a speed-up: a change wakes the poll of its file at once.  On a local
  filesystem, where inotify sees every write, watched files are polled only every
  ``poll_max_watched`` (10 s) as a safety net.  On network filesystems (NFS, Lustre,
  GPFS, ...) writes from other nodes are invisible to inotify: polling carries them.
* Directories are stat'ed every ``dir_poll_min``..``dir_poll_max`` (1..10 s, doubling
  while unchanged) and listed only when their mtime changes.
* **Metadata cap**: every ``stat``/``fstat``/``open``/``listdir`` of a timer-driven
  poll is paid from a token bucket of ``max_meta_per_s`` per second (default 500;
  burst a quarter second's worth; directory polls also from a bucket of a fifth of
  that).  Polls woken by inotify are not throttled (they follow the writes), nor are
  the first polls (the open) of files on local filesystems.  With N
  quiet files on a network filesystem, a file is polled about every
  ``max(quiet interval, N * 1.25 / cap)`` seconds: 1024 quiet files on Lustre cost at
  most 500 metadata calls/s from this process.  Data reads are bounded by
  ``max_buffered`` instead.
* Timer-driven polls are dispatched per lane once per tick (a quarter of the quiet
  interval, 50..250 ms) in batches: the thread hand-off, not the fstat, is what costs
  CPU.  Urgent work (inotify wake-ups, reads to continue, first polls) goes at once.
* **Never on the event loop**: all blocking calls run in a small pool of daemon
  threads (``workers``, default 4).  Work is grouped by mount point and kind ("lanes":
  live, history, directories), one batch in flight per lane.  A call that takes longer
  than ``call_timeout`` (5 s) marks its lane hung: the source gets an ``error`` event
  ("stat timed out after 5s"), the thread is written off (a replacement is started, up
  to ``max_hung``), the other lanes keep going and the loop never waits.  When the
  call returns, the lane's sources get an ``added`` event whose detail starts with
  "resumed".
* **Polite history**: with ``polite=True`` (default) the worker threads run at nice
  +10 (``os.setpriority(PRIO_PROCESS, native_thread_id, 10)``, per thread on Linux)
  and at most one history batch (one core) is in flight, so the start-up scan does
  not take CPU from training processes on the same node.
* **Memory**: at most ``max_buffered`` bytes (8 MiB) of chunks wait for the consumer;
  when the consumer is slower, polling pauses (the data waits in the files).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import heapq
import itertools
import os
import queue
import threading
import time
from typing import Any, Iterable

from denpex_tui.probes.mounts import MountTable

from ._fsinfo import CTO_FS, NAME_EVENTS, Inotify
from ._malloc import big_buffers_unmapped
from .filecap import FileCap
from .dirwatch import DirWatch, expand_spec
from .follower import FileFollower
from .sources import NAME_CHECK_MIN_S, NAME_CHECK_WATCHED_S, Chunk, PollResult, SourceEvent

__all__ = ["Tailer", "TailStream", "TokenBucket"]


class TokenBucket:
    """Token bucket for metadata calls: ``rate`` per second, ``burst`` at most.

    ``take`` is used before a call is made (estimate), ``charge`` after (actual extra
    calls; the balance may go negative, which delays later calls).
    """

    def __init__(self, rate: float | None, burst: float | None = None, clock=time.monotonic) -> None:
        self.rate = rate if rate and rate > 0 else None
        self.burst = burst if burst else (max(8.0, self.rate * 0.25) if self.rate else 0.0)
        self.tokens = self.burst
        self._clock = clock
        self._t = clock()
        self.spent = 0

    def _refill(self, now: float) -> None:
        if self.rate is None:
            return
        if now > self._t:
            self.tokens = min(self.burst, self.tokens + (now - self._t) * self.rate)
        self._t = now

    def take(self, n: float, now: float) -> bool:
        self.spent += n
        if self.rate is None:
            return True
        self._refill(now)
        if self.tokens >= n:
            self.tokens -= n
            return True
        self.spent -= n
        return False

    def charge(self, n: float, now: float) -> None:
        if n <= 0:
            return
        self.spent += n
        if self.rate is None:
            return
        self._refill(now)
        self.tokens -= n

    def wait_time(self, n: float, now: float) -> float:
        if self.rate is None:
            return 0.0
        self._refill(now)
        return max(0.0, (n - self.tokens) / self.rate)


def _nice_thread() -> None:
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
    except (OSError, AttributeError):
        pass


class _Pool:
    """Daemon worker threads (a thread stuck on a dead mount must not block exit)."""

    def __init__(self, max_threads: int, polite: bool) -> None:
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._max = max_threads
        self._polite = polite
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._closed = False

    def submit(self, fn, *args) -> concurrent.futures.Future:
        fut: concurrent.futures.Future = concurrent.futures.Future()
        self._q.put((fut, fn, args))
        with self._lock:
            if self._closed:
                return fut
            self._threads = [t for t in self._threads if t.is_alive()]
            if self._q.qsize() > self._idle and len(self._threads) < self._max:
                t = threading.Thread(target=self._worker, name="denpex-io", daemon=True)
                self._threads.append(t)
                t.start()
        return fut

    def _worker(self) -> None:
        if self._polite:
            _nice_thread()
        while True:
            with self._lock:
                self._idle += 1
            item = self._q.get()
            with self._lock:
                self._idle -= 1
            if item is None:
                return
            fut, fn, args = item
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn(*args))
            except BaseException as e:  # noqa: BLE001 - reported to the loop
                fut.set_exception(e)

    def shutdown(self) -> None:
        with self._lock:
            self._closed = True
            n = len(self._threads)
        for _ in range(n):
            self._q.put(None)


class _Lane:
    __slots__ = ("key", "mount", "fstype", "network", "cls", "waiting", "urgent", "inflight", "hung",
                 "next_ok")

    def __init__(self, key, mount: str, fstype: str, network: bool, cls: str) -> None:
        self.key = key
        self.mount = mount
        self.fstype = fstype
        self.network = network
        self.cls = cls  # "live", "hist" or "dir"
        self.waiting: dict[int, Any] = {}  # timer-driven polls, FIFO
        self.urgent: dict[int, Any] = {}  # inotify wake-ups, reads to continue, first polls
        self.inflight: _Batch | None = None
        self.hung: _Batch | None = None
        self.next_ok = 0.0


class _Batch:
    __slots__ = ("lane", "items", "budget", "current", "current_start", "abandoned", "started")

    def __init__(self, lane: _Lane, items: list, budget: int) -> None:
        self.lane = lane
        self.items = items
        self.budget = budget
        self.current: Any = None
        self.current_start = 0.0
        self.abandoned = False
        self.started = time.monotonic()

    def run(self) -> list[tuple[Any, PollResult | None]]:
        out: list[tuple[Any, PollResult | None]] = []
        budget = self.budget
        for p in self.items:
            if self.abandoned:
                out.append((p, None))
                continue
            now = time.monotonic()
            self.current = p
            self.current_start = now
            try:
                r = p.poll(now, max(0, budget))
            except Exception as e:  # noqa: BLE001 - a bug must not kill the tailer
                r = PollResult()
                r.items.append(SourceEvent(p.path, "error", f"internal error: {e!r}", p.source_id))
                r.hint = 30.0
            budget -= r.nbytes
            out.append((p, r))
        self.current = None
        self.current_start = 0.0
        return out


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

    Parameters (all optional except the sources):

    ``paths``          file paths, directories (recursive, log-looking names only) or
                       globs (``**`` allowed); re-evaluated while running.
    ``execs``          ``--exec`` specs (``'cmd'`` or ``'3=cmd'``), see execsource.py.
    ``from_end``       start at the end of files present at start-up (no history).
    ``history``        tag the start-up content of files as ``Chunk.history`` (default).
    ``poll_min``/``poll_quiet_min``/``poll_max``/``poll_max_watched``  per-file
                       polling interval bounds (see the module docstring).
    ``tick``           smallest dispatch period of timer-driven polls.
    ``dir_poll_min``/``dir_poll_max``  directory stat interval bounds.
    ``max_meta_per_s`` metadata calls per second cap (None: no cap).  Default 500.
    ``workers``        threads doing I/O at once (plus up to ``max_hung`` written-off
                       threads stuck on dead mounts).
    ``call_timeout``   seconds before a blocking call marks its filesystem hung.
    ``polite``         nice +10 for the I/O threads and one history batch at a time.
    ``inotify``        use inotify as a speed-up where available (default True).
    ``max_buffered``   bytes of undelivered chunks before polling pauses.
    ``max_files``      cap on followed files (an ``error`` event says when reached).
    ``proctable``      an optional ``ProcessTable``; its events join the stream.
    """

    def __init__(
        self,
        paths: Iterable[str] = (),
        execs: Iterable[str] = (),
        *,
        from_end: bool = False,
        history: bool = True,
        poll_min: float = 0.05,
        poll_quiet_min: float = 0.1,
        poll_max: float = 2.0,
        poll_max_watched: float = 10.0,
        dir_poll_min: float = 1.0,
        dir_poll_max: float = 10.0,
        max_meta_per_s: float | None = 500.0,
        workers: int = 4,
        max_hung: int = 8,
        call_timeout: float = 5.0,
        polite: bool = True,
        inotify: bool = True,
        max_buffered: int = 8 << 20,
        batch_bytes: int = 4 << 20,
        max_batch: int = 512,
        tick: float = 0.05,
        max_files: int = 10000,
        proctable: Any = None,
        mounts: MountTable | None = None,
    ) -> None:
        big_buffers_unmapped()  # a huge line must not leave the heaps fragmented (see _malloc)
        self.specs = [expand_spec(p) for p in paths]
        self.exec_specs = list(execs)
        self.start = "end" if from_end else "begin"
        self.history = history
        self.poll_min = poll_min
        self.poll_quiet_min = min(poll_quiet_min, poll_max)
        self.poll_max = poll_max
        self.poll_max_watched = max(poll_max, poll_max_watched)
        self._quiet_top = poll_max
        self._n_polled = 0
        self._recount_at = 0.0
        self._pressure = False
        self._spent_mark = 0
        self._rot = 0
        self.dir_poll_min = dir_poll_min
        self.dir_poll_max = dir_poll_max
        self.bucket = TokenBucket(max_meta_per_s)
        self.dir_bucket = TokenBucket(max_meta_per_s * 0.2 if max_meta_per_s else None)
        self.workers = max(1, workers)
        self.max_hung = max_hung
        self.call_timeout = call_timeout
        self.polite = polite
        self.use_inotify = inotify
        self.max_buffered = max_buffered
        self.batch_bytes = batch_bytes
        self.max_batch = max_batch
        self.tick = tick
        self._tick = tick
        self.max_files = max_files
        self.proctable = proctable
        self.mounts = mounts or MountTable()

        self.followers: dict[str, FileFollower] = {}
        self.dirs: dict[str, DirWatch] = {}
        self._lanes: dict[tuple, _Lane] = {}
        self._heap: list = []
        self._seq = itertools.count()
        self._q: collections.deque = collections.deque()
        self._buffered = 0
        self._healthy = 0
        self._hist_inflight = 0
        self._hung_count = 0
        self._stopping = False
        self._started = False
        self._stream: TailStream | None = None
        self._shut = False
        self._shutdown_task: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake_fut: asyncio.Future | None = None
        self._consumer_fut: asyncio.Future | None = None
        self._room_fut: asyncio.Future | None = None
        self._tasks: list[asyncio.Task] = []
        self._pool: _Pool | None = None
        self._ino: Inotify | None = None
        self._ino_paused = False
        self._cap = FileCap(max_files)  # live/filecap.py: what counts, what is left out, said
        self._cap_flush: asyncio.TimerHandle | None = None
        self._execs: list = []
        self.stats = collections.Counter()
        # abs path -> ((dev, ino), offset): files whose history the history pass read already
        self.start_at: dict[str, tuple] = {}

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
        return self.bucket.spent

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
        self._pool = _Pool(self.workers + self.max_hung, self.polite)
        if self.use_inotify:
            try:
                self._ino = Inotify()
                self._loop.add_reader(self._ino.fd, self._on_inotify)
            except (OSError, AttributeError, NotImplementedError):
                self._ino = None
        for spec in self.specs:
            self._add_spec(spec)
        for e in self.exec_specs:
            self._start_exec(e)
        self._tasks.append(asyncio.ensure_future(self._scheduler()))
        self._tasks.append(asyncio.ensure_future(self._watchdog()))
        if self.proctable is not None:
            self._tasks.append(asyncio.ensure_future(self._pump(self.proctable.run())))

    def _pop(self) -> Any:
        item = self._q.popleft()
        if isinstance(item, Chunk):
            self._buffered -= len(item.data)
            if self._buffered < self.max_buffered // 2:
                self._kick()
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
        self._setup(d, "dir")
        self._enqueue(d, urgent=True)

    def _add_dir(self, d: DirWatch) -> None:
        key = "dir:" + os.path.abspath(d.path) + "|" + d.spec.text
        if key in self.dirs:
            return
        if len(self.dirs) >= 2 * self.max_files + 64:  # torchrun: a folder per rank and attempt
            self._cap.left_dirs += 1
            self._report_cap(d.path)
            return
        d.source_id = key
        self.dirs[key] = d
        self._setup(d, "dir")
        self._enqueue(d, urgent=True)

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
            history=self.history and startup,
            startup=startup,
            explicit=explicit,
            history_only=history_only,
            cto=fstype in CTO_FS,
            inotify=self._ino,
            link_outside=link,
        )
        self.followers[sid] = f
        self._setup(f, "file")
        self._enqueue(f, urgent=True)

    def _report_cap(self, path: str, force: bool = False) -> None:
        msg = self._cap.report(force=force)
        if msg:
            self._put(SourceEvent(path, "error", msg, "cap:max-files"))
        elif self._cap.pending and self._cap_flush is None and self._loop is not None:
            def flush() -> None:
                self._cap_flush = None
                self._report_cap(path, force=True)

            self._cap_flush = self._loop.call_later(2.0, flush)

    def _setup(self, p, what: str) -> None:
        mount, fstype = self.mounts.lookup(p.path)
        p.lane = (mount, fstype)
        p.network = MountTable.is_network(fstype)
        p.interval = self.dir_poll_min if what == "dir" else self.poll_min
        p.repoll = False
        p.removed = False
        p.ino_kick = False
        p.uncharged = False
        p.urgent = False
        p.enq_at = 0.0

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
    def _lane_for(self, p) -> _Lane:
        mount, fstype = p.lane
        if isinstance(p, DirWatch):
            cls = "dir"
        elif p.in_history or p.state == "new" and p.startup and self.start == "begin" and self.history:
            cls = "hist"
        else:
            cls = "live"
        key = (mount, cls)
        lane = self._lanes.get(key)
        if lane is None:
            lane = _Lane(key, mount, fstype, MountTable.is_network(fstype), cls)
            self._lanes[key] = lane
        return lane

    def _enqueue(self, p, kick: bool = False, urgent: bool = False) -> None:
        """Queue a pollable for its lane.  ``urgent`` work (inotify wake-ups, reads
        to continue, first polls) goes to the lane's urgent queue and is dispatched at
        once; timer-driven polls wait in the lane's timer queue and are dispatched at
        most every ``tick`` per lane, so that they travel in batches (the thread
        hand-off, not the fstat, is what costs CPU)."""
        if kick:
            p.ino_kick = True
        urgent = urgent or kick
        if p.removed or p.inflight:
            if p.inflight:
                p.repoll = True
            return
        if p.queued:
            if urgent and not p.urgent:  # promote
                lane = p.qlane
                lane.waiting.pop(id(p), None)
                lane.urgent[id(p)] = p
                p.urgent = True
                self._kick()
            return
        p.queued = True
        p.seq = -1  # any heap entry is stale now
        lane = self._lane_for(p)
        p.enq_at = time.monotonic()
        p.qlane = lane
        if urgent:
            p.urgent = True
            lane.urgent[id(p)] = p
            self._kick()
        else:
            lane.waiting[id(p)] = p

    def _schedule(self, p, delay: float) -> None:
        p.seq = next(self._seq)
        p.next_due = time.monotonic() + delay
        heap = self._heap
        heapq.heappush(heap, (p.next_due, p.seq, p))
        if len(heap) > 2 * (len(self.followers) + len(self.dirs)) + 1024:
            # entries made stale by inotify wake-ups pile up under heavy writing:
            # rebuild (amortised O(1) per push) so memory stays bounded
            self._heap = [e for e in heap if e[1] == e[2].seq and not e[2].removed]
            heapq.heapify(self._heap)

    def _kick(self) -> None:
        f = self._wake_fut
        if f is not None and not f.done():
            f.set_result(None)

    def _room(self) -> None:
        f = self._room_fut
        if f is not None and not f.done():
            f.set_result(None)

    def _wake_all(self) -> None:
        # clean up even if nobody iterates again (e.g. the consumer task was cancelled):
        # exec commands are killed, tasks cancelled, files closed
        if self._started and self._shutdown_task is None and self._loop is not None and not self._loop.is_closed():
            self._shutdown_task = self._loop.create_task(self._shutdown())
        self._kick()
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

    def _collect_due(self, now: float) -> None:
        heap = self._heap
        while heap:
            due, seq, p = heap[0]
            if seq != p.seq or p.removed:
                heapq.heappop(heap)
                continue
            # quiet pollables may be taken early by a fifth of their interval, so
            # that one wake-up serves many of them (fewer, larger batches)
            if due > now + (0.2 * p.interval if p.interval >= 0.5 else 0.0):
                break
            heapq.heappop(heap)
            p.seq = -1
            self._enqueue(p)

    def _take(self, p, now: float) -> bool:
        """Pay for one poll.  Polls woken by inotify (a local write happened) are not
        throttled: they are as frequent as the writes (coalesced per 10 ms), and the
        cap is for polling, which is what loads a network filesystem's servers.
        Directory polls also pay from a second bucket of a fifth of the rate, so that
        a tree of 1024 rank directories cannot eat the budget of the files."""
        if p.ino_kick:
            return True
        if isinstance(p, FileFollower) and p.state == "new" and not p.network:
            # opening a file on a local filesystem costs no server anything: 2 000 rank
            # files open in a fraction of a second instead of 20 s behind the cap
            p.uncharged = True  # nor charged after the poll
            return True
        if isinstance(p, DirWatch) and not self.dir_bucket.take(1, now):
            return False
        return self.bucket.take(1, now)

    def _dispatch(self, now: float) -> float | None:
        """Submit batches; return seconds until tokens allow more (or None)."""
        if self._buffered >= self.max_buffered:
            return None
        token_wait = None
        lanes = list(self._lanes.values())
        if len(lanes) > 1:  # rotate, so that no lane always gets the tokens first
            self._rot = (self._rot + 1) % len(lanes)
            lanes = lanes[self._rot:] + lanes[: self._rot]
        for lane in lanes:
            if not lane.waiting and not lane.urgent:
                continue
            if lane.hung is not None:
                for q in (lane.urgent, lane.waiting):
                    for p in q.values():
                        if not p.hung_reported:
                            p.hung_reported = True
                            self._put(SourceEvent(p.path, "error",
                                                  f"waiting: a call on {lane.mount} ({lane.fstype}) timed out after {self.call_timeout:g}s",
                                                  p.source_id))
                continue
            if lane.inflight is not None:
                continue
            if self._healthy >= self.workers:
                break
            if lane.cls == "hist" and self.polite and self._hist_inflight >= 1:
                continue
            items = []
            short = False
            skipped = 0
            for p in lane.urgent.values():
                if not self._take(p, now):
                    short = True
                    skipped += 1
                    if skipped > 64:
                        break
                    continue  # inotify-woken ones just behind may still go
                items.append(p)
                if len(items) >= self.max_batch:
                    break
            if lane.waiting and len(items) < self.max_batch and now >= lane.next_ok and not short:
                for p in lane.waiting.values():
                    if not self._take(p, now):
                        short = True
                        break
                    items.append(p)
                    if len(items) >= self.max_batch:
                        break
            elif lane.waiting and now < lane.next_ok:
                w = lane.next_ok - now
                token_wait = w if token_wait is None else min(token_wait, w)
            if short:
                w = max(self.bucket.wait_time(1, now), self.dir_bucket.wait_time(1, now), 0.002)
                token_wait = w if token_wait is None else min(token_wait, w)
            if not items:
                continue
            timer_items = False
            for p in items:
                if p.urgent:
                    del lane.urgent[id(p)]
                    p.urgent = False
                else:
                    del lane.waiting[id(p)]
                    timer_items = True
                p.queued = False
                p.inflight = True
            if timer_items:
                lane.next_ok = now + self._tick
            budget = min(self.batch_bytes, self.max_buffered - self._buffered)
            if lane.cls == "dir":
                budget = 0
            batch = _Batch(lane, items, max(budget, 0))
            lane.inflight = batch
            self._healthy += 1
            if lane.cls == "hist":
                self._hist_inflight += 1
            self.stats["batches"] += 1
            cf = self._pool.submit(batch.run)
            fut = asyncio.wrap_future(cf, loop=self._loop)
            fut.add_done_callback(lambda f, b=batch: self._batch_done(b, f))
        return token_wait

    def _batch_done(self, batch: _Batch, fut: asyncio.Future) -> None:
        lane = batch.lane
        now = time.monotonic()
        try:
            results = fut.result()
        except BaseException as e:  # noqa: BLE001
            results = []
            for p in batch.items:
                r = PollResult()
                r.items.append(SourceEvent(p.path, "error", f"internal error: {e!r}", p.source_id))
                r.hint = 30.0
                results.append((p, r))
        if batch.abandoned:
            if lane.hung is batch:
                lane.hung = None
            self._hung_count -= 1
            waited = now - batch.started
            for q in list(self.followers.values()) + list(self.dirs.values()):
                if q.hung_reported and q.lane and q.lane[0] == lane.mount:
                    q.hung_reported = False
                    self._put(SourceEvent(q.path, "added", f"resumed: {lane.mount} answered again after {waited:.1f}s", q.source_id))
        else:
            self._healthy -= 1
            if lane.inflight is batch:
                lane.inflight = None
        if lane.cls == "hist" and not batch.abandoned:
            self._hist_inflight -= 1
        if self._stopping:
            # the tailer stopped while this batch ran: close what it touched (in a
            # throwaway daemon thread: close on a dead NFS mount may block)
            threading.Thread(target=lambda: [p.close() for p in batch.items], daemon=True).start()
            return
        for p, r in results:
            p.inflight = False
            if p.removed:
                continue
            if r is None:
                self._enqueue(p, urgent=True)
                continue
            self.stats["polls"] += 1
            if p.ino_kick:
                p.ino_kick = False
                self.stats["inotify_polls"] += 1
                self.stats["inotify_calls"] += r.calls
            elif p.uncharged:
                p.uncharged = False
            elif r.calls > 1:
                self.bucket.charge(r.calls - 1, now)
            for item in r.items:
                self._put(item)
            for path, hist_only, startup, explicit, link in r.discovered:
                f = self.followers.get(os.path.abspath(path))
                if f is None:
                    self._add_file(path, hist_only, startup, explicit, link)
                elif f.cur is None or f.awaiting_since is not None:
                    # the listing shows a file at a name whose follower lost it: look now
                    f.force_name_check = True
                    self._enqueue(f, urgent=True)
            for d in r.new_dirs:
                self._add_dir(d)
            if r.done:
                self._remove(p)
                continue
            self._reschedule(p, r)
        self._kick()

    def _reschedule(self, p, r: PollResult) -> None:
        if isinstance(p, DirWatch):
            watched = p.wd is not None and not p.network and self._ino is not None
            if watched and not p.force:
                # inotify reports entries created/renamed/deleted: polling is a safety net
                p.interval = self.dir_poll_max * 3
            elif r.discovered or r.new_dirs or p.force:
                p.interval = self.dir_poll_min
            else:
                top = self.dir_poll_max
                if p.is_root and p.state == "missing":
                    top = self.poll_max
                p.interval = min(max(p.interval, self.dir_poll_min) * 2.0, top)
        else:
            watched = p.cur is not None and p.cur.wd is not None and not p.network and self._ino is not None
            if watched:
                # inotify wakes it on every local change: polling is only a safety net
                p.interval = self.poll_max_watched
            elif r.active:
                p.interval = self._quiet_top if self._pressure else self.poll_min
            else:
                p.interval = min(max(p.interval, self.poll_min) * 2.0, self._quiet_top)
        if p.repoll or r.more:
            p.repoll = False
            self._enqueue(p, urgent=True)
            return
        # the interval counts from when the poll was due, not from when it ran: under
        # the metadata cap the wait in the queue is part of the interval (round-robin)
        delay = max(0.0, p.interval - (time.monotonic() - p.enq_at))
        if r.hold:
            delay = min(delay, 0.25)
        if r.hint:
            delay = max(delay, r.hint)
        self._schedule(p, delay)

    def _recount(self, now: float) -> None:
        """Quiet polling interval from the metadata budget.

        Files that polling must cover (no inotify watch on a local filesystem) share
        80 % of the cap: with N of them, a quiet file is polled every
        ``clamp(N * 1.25 / (0.8 * cap), poll_quiet_min, poll_max)`` seconds (about
        1.25 calls per quiet poll: the fstat, and a name check every few polls).
        """
        # under pressure (the cap was nearly used up in the last second) files that just
        # produced data are not polled faster than the others: plain round-robin, so
        # that no quiet file waits more than one cycle
        spent = self.bucket.spent
        if self.bucket.rate is not None and self._recount_at:
            dt = now - (self._recount_at - 1.0)
            self._pressure = dt > 0 and (spent - self._spent_mark) / dt >= 0.85 * self.bucket.rate
        self._spent_mark = spent
        self._recount_at = now + 1.0
        n = 0
        for f in self.followers.values():
            if not (f.cur is not None and f.cur.wd is not None and not f.network and self._ino is not None):
                n += 1
        self._n_polled = n
        rate = self.bucket.rate or 500.0  # no cap: still pace quiet polling as if 500/s
        self._quiet_top = min(self.poll_max, max(self.poll_quiet_min, n * 1.25 / (0.8 * rate)))
        # timer-driven polls are dispatched per tick: a quarter of the quiet interval
        # (batches get larger, and cheaper per poll, when there are many quiet files)
        self._tick = min(0.25, max(self.tick, self._quiet_top / 4))
        # the name is checked every 4th quiet poll (at least every NAME_CHECK_MIN_S)
        self._name_check_min = max(NAME_CHECK_MIN_S, 4 * self._quiet_top)
        for f in self.followers.values():
            if f.cur is not None and f.cur.wd is not None and not f.network and self._ino is not None:
                # inotify reports renames and deletions of the file we hold (which is
                # when the name must be checked): the periodic check is a safety net
                f.name_check_min = NAME_CHECK_WATCHED_S
            else:
                f.name_check_min = self._name_check_min

    async def _scheduler(self) -> None:
        loop = self._loop
        assert loop is not None
        while not self._stopping:
            now = time.monotonic()
            if now >= self._recount_at:
                self._recount(now)
            self._collect_due(now)
            token_wait = self._dispatch(now)
            timeout = 5.0
            if self._heap:
                timeout = min(timeout, max(0.0, self._heap[0][0] - now))
            if token_wait is not None:
                timeout = min(timeout, max(token_wait, 0.002))
            if not any(lane.urgent for lane in self._lanes.values()):
                # timer-driven polls are batched per tick: do not wake up for each one
                # (urgent work wakes the scheduler through _kick)
                timeout = max(timeout, self._tick)
            fut = loop.create_future()
            self._wake_fut = fut
            h = loop.call_later(max(timeout, 0.001), self._kick)
            try:
                await fut
            finally:
                h.cancel()
                self._wake_fut = None

    async def _watchdog(self) -> None:
        period = min(0.5, self.call_timeout / 4)
        while not self._stopping:
            await asyncio.sleep(period)
            now = time.monotonic()
            for lane in list(self._lanes.values()):
                b = lane.inflight
                if b is None or b.abandoned:
                    continue
                cur, start = b.current, b.current_start
                if cur is None or not start or now - start < self.call_timeout:
                    continue
                if self._hung_count >= self.max_hung:
                    continue  # keep waiting: no more threads to write off
                b.abandoned = True
                lane.inflight = None
                lane.hung = b
                self._healthy -= 1
                self._hung_count += 1
                if lane.cls == "hist":
                    self._hist_inflight -= 1
                self.stats["hung"] += 1
                cur.hung_reported = True
                self._put(SourceEvent(cur.path, "error",
                                      f"stat timed out after {self.call_timeout:g}s ({lane.mount}, {lane.fstype}); other sources continue",
                                      cur.source_id))
                for p in b.items:
                    if p is not cur and not p.hung_reported:
                        p.hung_reported = True
                        self._put(SourceEvent(p.path, "error",
                                              f"waiting: a call on {lane.mount} ({lane.fstype}) timed out after {self.call_timeout:g}s",
                                              p.source_id))
                self._kick()

    # -- inotify -------------------------------------------------------------------
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
            self._enqueue(owner, kick=True)
        if overflow:
            for p in list(self.followers.values()) + list(self.dirs.values()):
                self._enqueue(p)
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
                while self._buffered >= self.max_buffered and not self._stopping:
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
