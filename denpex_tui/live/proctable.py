"""Process table: which training processes exist on this node, and when each disappears.

``ProcessTable`` samples ``denpex_tui.probes.processes.find_training_processes()`` at a
low rate, off the event loop, and turns the differences into ``ProcessEvent`` s:

* every ``interval`` (5 s) it lists the pids in /proc (one readdir, ~1 ms with a few
  thousand processes); only if a pid appeared since the last sample does it run the full
  discovery (which reads every process's cmdline).  A full discovery also runs at least
  every ``full_interval`` (60 s), to catch a process that ``exec``'d into a launcher.
* every ``exit_interval`` (1 s) it checks the tracked processes only (one small read of
  ``/proc/PID/stat`` each), so an exit is on the timeline within about a second.

Identity is ``(pid, create_time)``: a reused pid is a new process, never the old one.
Exit codes of processes that are not our children are not knowable and are not
reported (``ProcessEvent`` has no exit code on purpose).
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable

__all__ = ["ProcessEvent", "ProcessTable"]


@dataclass(slots=True)
class ProcessEvent:
    pid: int
    rank: int | None
    local_rank: int | None
    state: str  # "started" | "exited"
    time: float
    role: str | None = None
    create_time: float | None = None
    cmdline: list[str] = field(default_factory=list)
    world_size: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"event": "process", "pid": self.pid, "rank": self.rank, "state": self.state,
                "local_rank": self.local_rank, "role": self.role}


def _default_finder() -> Callable[[], list]:
    from denpex_tui.probes.processes import find_training_processes

    return find_training_processes


def _stat_create_time(pid: int, proc: str) -> float | None:
    """create_time of a pid computed like psutil (None if gone or a zombie)."""
    try:
        from denpex_tui.probes.processes import create_time_from_ticks, read_stat
    except ImportError:  # pragma: no cover - probes not installed
        try:
            import psutil

            return psutil.Process(pid).create_time()
        except Exception:
            return None
    st = read_stat(pid, proc)
    if st is None or st[2] in ("Z", "X"):  # a zombie has exited: only its parent's wait() is missing
        return None
    return create_time_from_ticks(st[1])


class ProcessTable:
    """Track training processes; ``sample()``/``check_exits()`` are blocking (threads)."""

    def __init__(
        self,
        finder: Callable[[], list] | None = None,
        *,
        interval: float = 5.0,
        exit_interval: float = 1.0,
        full_interval: float = 60.0,
        proc: str = "/proc",
        clock: Callable[[], float] = time.time,
        create_time: Callable[[int], float | None] | None = None,
    ) -> None:
        self._finder = finder
        self._create_time_fn = create_time
        self.interval = interval
        self.exit_interval = exit_interval
        self.full_interval = full_interval
        self.proc = proc
        self.clock = clock
        self.known: dict[tuple[int, float], Any] = {}
        self._last_pids: set[int] | None = None
        self._last_full = float("-inf")
        self.samples = 0
        self.full_samples = 0
        self.available = True

    @property
    def finder(self) -> Callable[[], list]:
        if self._finder is None:
            self._finder = _default_finder()
        return self._finder

    def _pids(self) -> set[int]:
        try:
            return {int(n) for n in os.listdir(self.proc) if n.isdigit()}
        except OSError:
            return set()

    def _event(self, p: Any, state: str, now: float) -> "ProcessEvent":
        return ProcessEvent(p.pid, p.rank, p.local_rank, state, now, getattr(p, "role", None),
                            p.create_time, list(getattr(p, "cmdline", []) or []), getattr(p, "world_size", None))

    def _create_time(self, pid: int) -> float | None:
        if self._create_time_fn is not None:
            return self._create_time_fn(pid)
        return _stat_create_time(pid, self.proc)

    def _same(self, key: tuple[int, float], ct: float | None) -> bool:
        return ct is not None and abs(ct - key[1]) < 0.05

    def sample(self, force: bool = False) -> list[ProcessEvent]:
        """One sample: started and exited processes since the last one."""
        now = self.clock()
        mono = time.monotonic()
        self.samples += 1
        pids = self._pids()
        out: list[ProcessEvent] = []
        new_pids = self._last_pids is None or bool(pids - self._last_pids)
        self._last_pids = pids
        if force or new_pids or mono - self._last_full >= self.full_interval:
            self._last_full = mono
            self.full_samples += 1
            try:
                found = self.finder()
            except Exception:  # noqa: BLE001 - a probe bug must not stop following
                found = None
            if found is not None:
                current = {(p.pid, p.create_time): p for p in found}
                for key, p in current.items():
                    if key not in self.known:
                        self.known[key] = p
                        out.append(self._event(p, "started", now))
        out.extend(self._exits(pids, now))
        return out

    def check_exits(self) -> list[ProcessEvent]:
        """Cheap check of the tracked processes only."""
        if not self.known:
            return []
        return self._exits(None, self.clock())

    def _exits(self, pids: set[int] | None, now: float) -> list[ProcessEvent]:
        out = []
        for key, p in list(self.known.items()):
            pid = key[0]
            gone = (pids is not None and pid not in pids) or not self._same(key, self._create_time(pid))
            if gone:
                del self.known[key]
                out.append(self._event(p, "exited", now))
        return out

    async def run(self) -> AsyncIterator[ProcessEvent]:
        """Sample forever (until cancelled); the blocking work runs in a thread."""
        loop = asyncio.get_running_loop()
        try:
            self.finder
        except ImportError:
            self.available = False
            return
        next_full = 0.0
        while True:
            mono = time.monotonic()
            if mono >= next_full:
                events = await loop.run_in_executor(None, self.sample)
                next_full = mono + self.interval
            else:
                events = await loop.run_in_executor(None, self.check_exits)
            for e in events:
                yield e
            await asyncio.sleep(min(self.exit_interval, max(0.0, next_full - time.monotonic())) or self.exit_interval)
