"""The live engine's first phase: the job's history, read by the same pass ``scan`` uses.

The files that exist when following begins are found as ``scan`` finds them
(:func:`denpex_tui.core.sources.discover`, under the hung-mount watchdog) and read once by
:func:`denpex_tui.core.history.read_history` (on every core for a big job). Each source's
processor joins the engine as it completes, so a diagnosis can be shown *so far* while the rest
is read; the follower then starts where the history stopped (``Tailer.start_at``).
"""

from __future__ import annotations

import os
import threading
from typing import Any, Callable

from denpex_tui.core.clock import since_start
from denpex_tui.core.history import IO_TIMEOUT_S, ReadProgress, SourceHistory, read_history
from denpex_tui.core.matcher import Matcher
from denpex_tui.core.model import SourceInfo
from denpex_tui.core.sources import classify, discover
from denpex_tui.core.streamtimes import HANDOFF_BYTES
from denpex_tui.core.watchdog import watchdog

from .events import HistoryDone

__all__ = ["Backlog"]


def find_sources(paths: list[str], io_timeout: float = IO_TIMEOUT_S) -> tuple[list[SourceInfo], list[str]]:
    """The files of ``paths`` as ``scan`` finds them (a hung mount: what was found before it)."""
    sources: list[SourceInfo] = []
    warnings: list[str] = []
    seen: set[str] = set()
    for arg in paths:
        counter: dict = {"n": 0}

        def one(arg=arg, counter=counter):
            return discover([arg], progress=counter)

        done, d = watchdog(one, lambda counter=counter: counter["n"], io_timeout)
        if done:
            found, warns = d.sources, d.warnings
        else:
            found = []
            for i, p in enumerate(sorted(counter.get("found", []))):
                src = classify(p, i)
                src.size = counter.get("sizes", {}).get(p, 0)
                found.append(src)
            warns = list(counter.get("warnings", [])) + [
                f"{counter.get('current') or arg}: no answer for {io_timeout:.0f} s while listing it "
                "(hung filesystem?): skipped"]
        for s in found:
            if s.path not in seen:
                seen.add(s.path)
                s.order = len(sources)
                sources.append(s)
        # warnings about paths that do not exist (yet) are the tailer's to report
        warnings += [w for w in warns if "no such file" not in w and "no file matches" not in w]
    return sources, warnings


class Backlog:
    """Reads the history in its own thread; ``adopt`` runs for each source in the engine's parse
    thread (through ``submit``), so the job is only ever changed there."""

    def __init__(self, paths: list[str], matcher: Matcher, *, index: bool, polite: bool, jobs: int | None = None):
        self.paths = paths
        self.matcher = matcher
        self.index = index
        self.polite = polite
        self.jobs = jobs
        self.progress = ReadProgress()
        self.histories: dict[str, SourceHistory] = {}
        self.warnings: list[str] = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._early: list[SourceHistory] = []  # read before anyone attached
        self._sink: tuple[Callable[[SourceHistory], None], Callable[[Any], None]] | None = None
        self._end: tuple[BaseException | None] | None = None

    def start(self) -> None:
        """Begin the pass now, in its own daemon thread (quitting never waits for it): the app
        calls this before its first frame, so the reading overlaps the UI's start-up. What is
        read before :meth:`attach` waits for it, in order."""
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._in_thread, name="denpex-history", daemon=True)
        self._thread.start()

    def attach(self, adopt: Callable[[SourceHistory], None], done: Callable[[BaseException | None], None]) -> None:
        """``adopt`` gets every source read (those read already first, in order); ``done`` the
        end of the pass (None, or what it raised). Starts the pass if it has not started."""
        self.start()
        with self._lock:  # adopt only hands work on: cheap to call under the lock
            for h in self._early:
                adopt(h)
            self._early = []
            self._sink = (adopt, done)
            if self._end is not None:
                done(self._end[0])

    def _in_thread(self) -> None:
        end: BaseException | None = None
        try:
            self.run(self._got)
        except BaseException as exc:  # handed to whoever attached
            end = exc
        with self._lock:
            self._end = (end,)
            if self._sink is not None:
                self._sink[1](end)

    def _got(self, h: SourceHistory) -> None:
        with self._lock:
            if self._sink is None:
                self._early.append(h)
            else:
                self._sink[0](h)

    def run(self, adopt: Callable[[SourceHistory], None]) -> None:
        """The whole pass (blocking: run it in a thread)."""
        sources, self.warnings = find_sources(self.paths)
        self.progress.total = sum(s.size for s in sources)
        self.progress.sources = len(sources)

        def got(h: SourceHistory) -> None:
            self.histories[os.path.abspath(h.info.path)] = h
            adopt(h)

        # next to a running job the pass is polite (lower priority); it still uses the cores
        # that are free, since the diagnosis waits for it
        read_history(sources, self.matcher, got, index=self.index, partial_tail=False, jobs=self.jobs,
                     polite=False, progress=self.progress)

    def start_at(self) -> dict[str, tuple]:
        """Where the follower takes over, per file (absolute path)."""
        out: dict[str, tuple] = {}
        for p, h in self.histories.items():
            if h.info.kind == "error-json":
                out[p] = (None, h.stop)  # rewritten, not appended: a new one is read again
            elif h.kind == "text":
                out[p] = (h.ident, h.stop, b"".join(h.processor._recent)[-HANDOFF_BYTES:])
            else:  # gzip (a rotated copy) or UTF-16: read whole by the history pass, not followed
                out[p] = (h.ident, -1)
        return out

    def done(self) -> HistoryDone:
        idx = {h.info.path: h.index for h in self.histories.values() if h.index is not None}
        infos = {h.info.path: h.info for h in self.histories.values()}
        return HistoryDone(self.progress.read(), self.progress.total, since_start(), idx, infos, list(self.warnings))
