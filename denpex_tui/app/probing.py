"""The probes, in a thread: fd and disk readings, trends, the differential.

``ProbeLoop.run`` is the body of the app's thread worker. It takes a snapshot every
``interval`` seconds and posts a :class:`ProbeUpdate` (latest value wins). Between snapshots it
serves requests from the app through a queue: log lines that name paths or checkpoint saves
(they add watched paths and feed the fd-per-save trend), and "measure this finding" (checklist
metrics and the ENOSPC/EMFILE differential, which may walk a filesystem: never on the UI loop).
"""

from __future__ import annotations

import os
import queue
import threading
import time
from typing import Any, Callable

from denpex_tui.probes.differential import differential, differential_kind
from denpex_tui.probes.metrics import metrics_for
from denpex_tui.probes.logpaths import LogScan, scan_line
from denpex_tui.probes.jobtie import tie_to_job
from denpex_tui.probes.processes import find_training_processes
from denpex_tui.probes.sampler import Prober
from denpex_tui.probes.trends import TrendTracker

from .messages import Measured, ProbeUpdate

__all__ = ["ProbeLoop"]


class ProbeLoop:
    def __init__(self, *, pids: list[int] | None = None, paths: list[str] | None = None, discover: bool | None = None,
                 interval: float = 5.0, prober_factory: Callable[[], Prober] | None = None,
                 job_paths: list[str] | None = None, all_users: bool = False) -> None:
        self.pids = list(pids or [])
        self.paths = list(paths or [])
        self.discover = discover
        self.interval = interval
        self.prober_factory = prober_factory
        self.requests: queue.Queue = queue.Queue()
        self.stopped = threading.Event()
        self.job_paths = list(job_paths or [])
        self.all_users = all_users
        self.ties: dict[int, str] = {}  # pid -> how it was tied to the job
        self.others: list = []  # training processes here that are not the job's

    # -- called from the app (any thread) --------------------------------------------------

    def lines(self, items: list[tuple[str, str, int, int | None, float | None]]) -> None:
        """(text, log path, line, rank, time) of lines that may name paths or saves."""
        if items:
            self.requests.put(("lines", items))

    def measure(self, key: Any, signature: str, path: str | None, pid: int | None = None,
                rank: int | None = None, node: str | None = None) -> None:
        """Checklist metrics and the differential of a finding; ``node``: where it was logged."""
        self.requests.put(("measure", key, signature, path, pid, node))

    def stop(self) -> None:
        self.stopped.set()
        self.requests.put(("stop",))

    # -- the thread ------------------------------------------------------------------------

    def run(self, post: Callable[[Any], Any]) -> None:
        prober = self.prober_factory() if self.prober_factory else Prober(
            pids=self.pids or None, paths=self.paths, discover=self.discover,
            finder=self._job_processes if self.job_paths else None)
        trends = TrendTracker()
        snap = None
        next_at = 0.0
        while not self.stopped.is_set():
            now = time.monotonic()
            if now >= next_at:
                try:
                    snap = prober.snapshot()
                    trends.ingest(snap)
                    post(ProbeUpdate(snap, {t.path: t for t in trends.path_trends()},
                                     {t.pid: t for t in trends.process_trends()},
                                     ties=dict(self.ties), others=list(self.others)))
                except Exception:  # a probe that fails must not end the app; try again later
                    pass
                next_at = time.monotonic() + self.interval
            try:
                req = self.requests.get(timeout=max(0.05, next_at - time.monotonic()))
            except queue.Empty:
                continue
            kind = req[0]
            if kind == "stop":
                break
            if kind == "lines":
                self._lines(req[1], prober, trends)
                next_at = min(next_at, time.monotonic() + 0.5)  # show a new path soon
            elif kind == "measure":
                _, key, sig, path, pid, node = req
                if snap is None:
                    snap = prober.snapshot()
                    trends.ingest(snap)
                try:
                    metrics = metrics_for(path, snap, trends=trends, pid=pid)
                    diff = differential(sig, path, snap, trends, pid=pid, error_node=node) if differential_kind(sig) else None
                except Exception:
                    metrics, diff = {}, None
                post(Measured(key, metrics, diff))

    def _job_processes(self):
        """The training processes tied to the job (and the others, kept apart for the screen)."""
        ours, others = tie_to_job(find_training_processes(), self.job_paths, all_users=self.all_users)
        self.ties = {t.process.pid: t.how for t in ours}
        self.others = [t.process for t in others]
        return [t.process for t in ours]

    @staticmethod
    def _lines(items, prober: Prober, trends: TrendTracker) -> None:
        for text, log, line, rank, t in items:
            scan = LogScan()
            try:
                scan_line(text, log, line, scan)
            except Exception:
                continue
            for w in scan.watch:
                if w.exists and os.path.isabs(w.path):
                    prober.add_path(w.path, w.why, w.source_line)
            for s in scan.saves:
                trends.note_checkpoint_save(s.rank if s.rank is not None else rank,
                                            t if t is not None else time.time(), local_rank=s.local_rank)
