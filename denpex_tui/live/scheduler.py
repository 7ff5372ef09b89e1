"""When each followed file and directory is polled, on which lane, paid from which budget.

The ``Tailer`` (live/tailer.py) owns the sources and the output queue; its
``PollScheduler`` owns time: every pollable (``FileFollower``, ``DirWatch``) waits either
in a heap of due times (timer-driven polls) or in its lane's queues, and the scheduler
loop dispatches batches to the worker threads (``pollwork.py``).

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

The scheduler reads from the tailer its options, its ``followers``/``dirs``, the bytes
buffered, ``_stopping``, the pool, the loop and the inotify instance, and hands every
poll's result to ``Tailer._deliver``.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import threading
import time
from typing import Any, Protocol

from denpex_tui.probes.mounts import MountTable

from .dirwatch import DirWatch
from .follower import FileFollower
from .pollwork import Batch, Lane, TokenBucket
from .sources import NAME_CHECK_MIN_S, NAME_CHECK_WATCHED_S, PollResult, SourceEvent

__all__ = ["PollScheduler"]


class Host(Protocol):
    """What the scheduler uses of its tailer (live/tailer.py)."""

    opts: Any  # TailOptions
    start: str  # "begin" or "end"
    mounts: MountTable
    followers: dict[str, FileFollower]
    dirs: dict[str, DirWatch]
    stats: Any  # collections.Counter
    _buffered: int  # bytes of chunks waiting for the consumer
    _stopping: bool
    _pool: Any  # WorkerPool
    _loop: asyncio.AbstractEventLoop | None
    _ino: Any  # Inotify | None

    def _put(self, item: Any) -> None: ...

    def _deliver(self, p: Any, r: PollResult) -> bool: ...


class PollScheduler:
    """Lanes, due times, budgets and batches for one ``Tailer``."""

    def __init__(self, tailer: Host) -> None:
        self.t = tailer
        o = tailer.opts
        self.opts = o
        self.bucket = TokenBucket(o.max_meta_per_s)
        self.dir_bucket = TokenBucket(o.max_meta_per_s * 0.2 if o.max_meta_per_s else None)
        self.lanes: dict[tuple, Lane] = {}
        self.heap: list = []
        self._seq = itertools.count()
        self._rot = 0
        self._quiet_top = o.poll_max
        self._tick = o.tick
        self._recount_at = 0.0
        self._pressure = False
        self._spent_mark = 0
        self._name_check_min = NAME_CHECK_MIN_S
        self._healthy = 0  # batches in flight on lanes that are not hung
        self._hist_inflight = 0
        self._hung_count = 0
        self._wake_fut: asyncio.Future | None = None

    # -- queues ---------------------------------------------------------------------
    def setup(self, p, what: str) -> None:
        """Give a new pollable its lane and scheduling state."""
        mount, fstype = self.t.mounts.lookup(p.path)
        p.lane = (mount, fstype)
        p.network = MountTable.is_network(fstype)
        p.interval = self.opts.dir_poll_min if what == "dir" else self.opts.poll_min
        p.repoll = False
        p.removed = False
        p.ino_kick = False
        p.uncharged = False
        p.urgent = False
        p.enq_at = 0.0

    def _lane_for(self, p) -> Lane:
        mount, fstype = p.lane
        if isinstance(p, DirWatch):
            cls = "dir"
        elif p.in_history or p.state == "new" and p.startup and self.t.start == "begin" and self.opts.history:
            cls = "hist"
        else:
            cls = "live"
        key = (mount, cls)
        lane = self.lanes.get(key)
        if lane is None:
            lane = Lane(key, mount, fstype, MountTable.is_network(fstype), cls)
            self.lanes[key] = lane
        return lane

    def enqueue(self, p, kick: bool = False, urgent: bool = False) -> None:
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
                self.kick()
            return
        p.queued = True
        p.seq = -1  # any heap entry is stale now
        lane = self._lane_for(p)
        p.enq_at = time.monotonic()
        p.qlane = lane
        if urgent:
            p.urgent = True
            lane.urgent[id(p)] = p
            self.kick()
        else:
            lane.waiting[id(p)] = p

    def _schedule(self, p, delay: float) -> None:
        p.seq = next(self._seq)
        p.next_due = time.monotonic() + delay
        heap = self.heap
        heapq.heappush(heap, (p.next_due, p.seq, p))
        if len(heap) > 2 * (len(self.t.followers) + len(self.t.dirs)) + 1024:
            # entries made stale by inotify wake-ups pile up under heavy writing:
            # rebuild (amortised O(1) per push) so memory stays bounded
            self.heap = [e for e in heap if e[1] == e[2].seq and not e[2].removed]
            heapq.heapify(self.heap)

    def kick(self) -> None:
        """Wake the scheduler loop."""
        f = self._wake_fut
        if f is not None and not f.done():
            f.set_result(None)

    def _collect_due(self, now: float) -> None:
        heap = self.heap
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
            self.enqueue(p)

    # -- dispatch -------------------------------------------------------------------
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
        t = self.t
        if t._buffered >= self.opts.max_buffered:
            return None
        token_wait = None
        lanes = list(self.lanes.values())
        if len(lanes) > 1:  # rotate, so that no lane always gets the tokens first
            self._rot = (self._rot + 1) % len(lanes)
            lanes = lanes[self._rot:] + lanes[: self._rot]
        for lane in lanes:
            if not lane.waiting and not lane.urgent:
                continue
            if lane.hung is not None:
                self._report_waiting(lane.urgent.values(), lane)
                self._report_waiting(lane.waiting.values(), lane)
                continue
            if lane.inflight is not None:
                continue
            if self._healthy >= self.opts.workers:
                break
            if lane.cls == "hist" and self.opts.polite and self._hist_inflight >= 1:
                continue
            items, short = self._fill(lane, now)
            if lane.waiting and now < lane.next_ok:
                w = lane.next_ok - now
                token_wait = w if token_wait is None else min(token_wait, w)
            if short:
                w = max(self.bucket.wait_time(1, now), self.dir_bucket.wait_time(1, now), 0.002)
                token_wait = w if token_wait is None else min(token_wait, w)
            if items:
                self._submit(lane, items, now)
        return token_wait

    def _fill(self, lane: Lane, now: float) -> tuple[list, bool]:
        """The polls of one batch: urgent ones first, then timer-driven ones (at most once
        per tick per lane); ``short`` when the budget ran out."""
        max_batch = self.opts.max_batch
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
            if len(items) >= max_batch:
                break
        if lane.waiting and len(items) < max_batch and now >= lane.next_ok and not short:
            for p in lane.waiting.values():
                if not self._take(p, now):
                    short = True
                    break
                items.append(p)
                if len(items) >= max_batch:
                    break
        return items, short

    def _submit(self, lane: Lane, items: list, now: float) -> None:
        t = self.t
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
        budget = min(self.opts.batch_bytes, self.opts.max_buffered - t._buffered)
        if lane.cls == "dir":
            budget = 0
        batch = Batch(lane, items, max(budget, 0))
        lane.inflight = batch
        self._healthy += 1
        if lane.cls == "hist":
            self._hist_inflight += 1
        t.stats["batches"] += 1
        cf = t._pool.submit(batch.run)
        fut = asyncio.wrap_future(cf, loop=t._loop)
        fut.add_done_callback(lambda f, b=batch: self._batch_done(b, f))

    def _report_waiting(self, pollables, lane: Lane, but: Any = None) -> None:
        for p in pollables:
            if p is not but and not p.hung_reported:
                p.hung_reported = True
                self.t._put(SourceEvent(p.path, "error",
                                        f"waiting: a call on {lane.mount} ({lane.fstype}) timed out after {self.opts.call_timeout:g}s",
                                        p.source_id))

    # -- results --------------------------------------------------------------------
    def _batch_done(self, batch: Batch, fut: asyncio.Future) -> None:
        t = self.t
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
        self._settle(batch, now)
        if t._stopping:
            # the tailer stopped while this batch ran: close what it touched (in a
            # throwaway daemon thread: close on a dead NFS mount may block)
            threading.Thread(target=lambda: [p.close() for p in batch.items], daemon=True).start()
            return
        for p, r in results:
            p.inflight = False
            if p.removed:
                continue
            if r is None:
                self.enqueue(p, urgent=True)
                continue
            self._charge(p, r, now)
            if t._deliver(p, r):
                self._reschedule(p, r)
        self.kick()

    def _settle(self, batch: Batch, now: float) -> None:
        """A batch came back: its lane is free again, or (written off as hung) answered."""
        lane = batch.lane
        if batch.abandoned:
            if lane.hung is batch:
                lane.hung = None
            self._hung_count -= 1
            waited = now - batch.started
            t = self.t
            for q in list(t.followers.values()) + list(t.dirs.values()):
                if q.hung_reported and q.lane and q.lane[0] == lane.mount:
                    q.hung_reported = False
                    t._put(SourceEvent(q.path, "added", f"resumed: {lane.mount} answered again after {waited:.1f}s", q.source_id))
        else:
            self._healthy -= 1
            if lane.inflight is batch:
                lane.inflight = None
        if lane.cls == "hist" and not batch.abandoned:
            self._hist_inflight -= 1

    def _charge(self, p, r: PollResult, now: float) -> None:
        stats = self.t.stats
        stats["polls"] += 1
        if p.ino_kick:
            p.ino_kick = False
            stats["inotify_polls"] += 1
            stats["inotify_calls"] += r.calls
        elif p.uncharged:
            p.uncharged = False
        elif r.calls > 1:
            self.bucket.charge(r.calls - 1, now)

    def _watched(self, p) -> bool:
        """Changes of ``p`` reach us by inotify (a watch on a local filesystem)."""
        wd = p.wd if isinstance(p, DirWatch) else (p.cur.wd if p.cur is not None else None)
        return wd is not None and not p.network and self.t._ino is not None

    def _reschedule(self, p, r: PollResult) -> None:
        o = self.opts
        if isinstance(p, DirWatch):
            if self._watched(p) and not p.force:
                # inotify reports entries created/renamed/deleted: polling is a safety net
                p.interval = o.dir_poll_max * 3
            elif r.discovered or r.new_dirs or p.force:
                p.interval = o.dir_poll_min
            else:
                top = o.dir_poll_max
                if p.is_root and p.state == "missing":
                    top = o.poll_max
                p.interval = min(max(p.interval, o.dir_poll_min) * 2.0, top)
        elif self._watched(p):
            # inotify wakes it on every local change: polling is only a safety net
            p.interval = o.poll_max_watched
        elif r.active:
            p.interval = self._quiet_top if self._pressure else o.poll_min
        else:
            p.interval = min(max(p.interval, o.poll_min) * 2.0, self._quiet_top)
        if p.repoll or r.more:
            p.repoll = False
            self.enqueue(p, urgent=True)
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
        o = self.opts
        # under pressure (the cap was nearly used up in the last second) files that just
        # produced data are not polled faster than the others: plain round-robin, so
        # that no quiet file waits more than one cycle
        spent = self.bucket.spent
        if self.bucket.rate is not None and self._recount_at:
            dt = now - (self._recount_at - 1.0)
            self._pressure = dt > 0 and (spent - self._spent_mark) / dt >= 0.85 * self.bucket.rate
        self._spent_mark = spent
        self._recount_at = now + 1.0
        followers = self.t.followers.values()
        watched = [self._watched(f) for f in followers]
        n = watched.count(False)
        rate = self.bucket.rate or 500.0  # no cap: still pace quiet polling as if 500/s
        self._quiet_top = min(o.poll_max, max(o.poll_quiet_min, n * 1.25 / (0.8 * rate)))
        # timer-driven polls are dispatched per tick: a quarter of the quiet interval
        # (batches get larger, and cheaper per poll, when there are many quiet files)
        self._tick = min(0.25, max(o.tick, self._quiet_top / 4))
        # the name is checked every 4th quiet poll (at least every NAME_CHECK_MIN_S)
        self._name_check_min = max(NAME_CHECK_MIN_S, 4 * self._quiet_top)
        for f, w in zip(followers, watched):
            # inotify reports renames and deletions of the file we hold (which is when
            # the name must be checked): then the periodic check is a safety net
            f.name_check_min = NAME_CHECK_WATCHED_S if w else self._name_check_min

    # -- the loops ------------------------------------------------------------------
    async def run(self) -> None:
        """The scheduler loop: collect due polls, dispatch, sleep until the next one."""
        t = self.t
        loop = t._loop
        assert loop is not None
        while not t._stopping:
            now = time.monotonic()
            if now >= self._recount_at:
                self._recount(now)
            self._collect_due(now)
            token_wait = self._dispatch(now)
            timeout = 5.0
            if self.heap:
                timeout = min(timeout, max(0.0, self.heap[0][0] - now))
            if token_wait is not None:
                timeout = min(timeout, max(token_wait, 0.002))
            if not any(lane.urgent for lane in self.lanes.values()):
                # timer-driven polls are batched per tick: do not wake up for each one
                # (urgent work wakes the scheduler through kick)
                timeout = max(timeout, self._tick)
            fut = loop.create_future()
            self._wake_fut = fut
            h = loop.call_later(max(timeout, 0.001), self.kick)
            try:
                await fut
            finally:
                h.cancel()
                self._wake_fut = None

    async def watchdog(self) -> None:
        """Write off a batch whose current call takes longer than ``call_timeout``."""
        t = self.t
        timeout = self.opts.call_timeout
        period = min(0.5, timeout / 4)
        while not t._stopping:
            await asyncio.sleep(period)
            now = time.monotonic()
            for lane in list(self.lanes.values()):
                b = lane.inflight
                if b is None or b.abandoned:
                    continue
                cur, start = b.current, b.current_start
                if cur is None or not start or now - start < timeout:
                    continue
                if self._hung_count >= self.opts.max_hung:
                    continue  # keep waiting: no more threads to write off
                b.abandoned = True
                lane.inflight = None
                lane.hung = b
                self._healthy -= 1
                self._hung_count += 1
                if lane.cls == "hist":
                    self._hist_inflight -= 1
                t.stats["hung"] += 1
                cur.hung_reported = True
                t._put(SourceEvent(cur.path, "error",
                                   f"stat timed out after {timeout:g}s ({lane.mount}, {lane.fstype}); other sources continue",
                                   cur.source_id))
                self._report_waiting(b.items, lane, but=cur)
                self.kick()
