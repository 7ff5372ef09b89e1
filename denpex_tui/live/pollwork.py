"""The pieces the tailer's scheduler works with: metadata budget, threads, lanes, batches.

``TokenBucket``  metadata calls per second (``take`` before a poll, ``charge`` after).
``WorkerPool``   daemon threads doing the blocking calls (a thread stuck on a dead mount
                 must not block exit; one can be written off and replaced).
``Lane``         the pollables of one mount point and kind (``live``, ``hist``, ``dir``):
                 one batch in flight per lane, so a hung mount stalls only its own lane.
``Batch``        polls run back to back in one worker thread (the thread hand-off, not the
                 fstat, is what costs CPU); the watchdog reads ``current`` to see a hung call.
"""

from __future__ import annotations

import concurrent.futures
import os
import queue
import threading
import time
from typing import Any

from .sources import PollResult, SourceEvent

__all__ = ["Batch", "Lane", "TokenBucket", "WorkerPool"]


class TokenBucket:
    """Token bucket for metadata calls: ``rate`` per second, ``burst`` at most.

    ``take`` is used before a call is made (estimate), ``charge`` after (actual extra
    calls; the balance may go negative, which delays later calls).
    """

    def __init__(self, rate: float | None, burst: float | None = None, clock=time.monotonic) -> None:
        self.rate = rate if rate and rate > 0 else None
        self.burst = burst if burst else (max(8.0, self.rate * 0.25) if self.rate else 0.0)
        self.tokens = self.burst
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


class WorkerPool:
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


class Lane:
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
        self.inflight: Batch | None = None
        self.hung: Batch | None = None
        self.next_ok = 0.0


class Batch:
    __slots__ = ("lane", "items", "budget", "current", "current_start", "abandoned", "started")

    def __init__(self, lane: Lane, items: list, budget: int) -> None:
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
