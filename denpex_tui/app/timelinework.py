"""The timeline's builder thread: merges the history the engine's history pass indexed, then
folds in what the engine says was written (following), builds filtered views and runs searches.

One thread owns every change to the :class:`~denpex_tui.app.timeline.Timeline`; it only posts
messages (``TimelineChanged``, ``ViewReady``, ``SearchDone``) and never touches a widget.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from typing import Any, Callable

from denpex_tui.core.lines import npy
from denpex_tui.core.model import SourceInfo
from denpex_tui.core.heap import give_back

from .messages import LevelsDone, SearchDone, TimelineChanged, ViewReady
from .search import SearchQuery, find_all
from .timeline import Timeline
from .timeviews import view_for

__all__ = ["TimelineWorker"]

PROGRESS_S = 0.25


class TimelineWorker:
    def __init__(self, timeline: Timeline, paths: list[str], post: Callable[[Any], Any]) -> None:
        self.tl = timeline
        self.paths = list(paths)
        self.post = post
        self.q: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._last_post = 0.0
        self.search_gen = 0
        self.requested = 0  # requests queued, and handled (both only grow): idle when equal
        self.handled = 0
        self._view: tuple[int | None, bool] = (None, True)  # the filter last asked for
        self._gone: list[int] = []  # sources whose lines went with their file, as views know

    @property
    def idle(self) -> bool:
        """The history is merged, every request so far is handled (its messages posted) and no
        line waits for its settle window."""
        return self.tl.built and self.handled == self.requested and not self.tl.holding

    def _put(self, item: Any) -> None:
        self.requested += 1
        self.q.put(item)

    def start(self) -> None:
        # numpy now, not at the first merge: its import (90 ms, a second under load) inside the
        # settle window made lines that arrived during it late, merged at the end out of time order
        npy.import_now()
        self._thread = threading.Thread(target=self._run, name="denpex-timeline", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.q.put(None)

    # -- requests (any thread) -------------------------------------------------------------

    def history(self, indexes: dict, infos: dict) -> None:
        """The engine's history pass is done: its line indexes, to merge."""
        self._put(("history", indexes, infos))

    def lines(self, lines: list) -> None:
        """The engine's new lines: files are read back from disk, other sources spooled."""
        if lines:
            self._put(("lines", lines))

    def recheck(self, paths: list[str]) -> None:
        """A source event (added, deleted, replaced, rotated, truncated): see what of it is
        still there, and what the name leads to now."""
        self._put(("recheck", list(paths)))

    def view(self, rank: int | None, hide_copies: bool) -> None:
        self._put(("view", rank, hide_copies))

    def rank_map(self, rank_map: dict) -> None:
        self._put(("rank_map", dict(rank_map)))

    def levels(self, kind: str, query: SearchQuery) -> None:
        self._put(("levels", kind, query))

    def search(self, query: SearchQuery) -> int:
        self.search_gen += 1
        self._put(("search", query, self.search_gen))
        return self.search_gen

    # -- the thread ------------------------------------------------------------------------

    def _changed(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._last_post >= PROGRESS_S:
            self._last_post = now
            self.post(TimelineChanged(self.tl.rows, self.tl.built))

    def _run(self) -> None:
        try:
            self._loop()
        except Exception as exc:  # shown on screen, never a traceback under it
            self.post(TimelineChanged(self.tl.rows, True, error=f"{type(exc).__name__}: {exc}"))
        finally:
            self.tl.close()

    def _loop(self) -> None:
        while True:
            due = self.tl.due()
            try:
                item = self.q.get(timeout=None if due is None else max(0.0, due - time.monotonic()))
            except queue.Empty:  # held lines whose settle window passed
                if self.tl.settle():
                    self._changed(force=True)
                continue
            if item is None:
                break
            batch = [item]
            while True:  # fold what queued up meanwhile into one pass
                try:
                    nxt = self.q.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    self._handle(batch)
                    return
                batch.append(nxt)
            self._handle(batch)
            self.handled += len(batch)

    def _handle(self, batch: list) -> None:
        for item in batch:
            if item[0] == "history":  # the read's and then the merge's freed heap back to the kernel
                give_back()  # (a 1 GB job: ~27 MB, else under the merge's own arrays)
                self.tl.adopt(item[1], item[2])
                give_back()
                self._changed(force=True)
        names: set[str] = set()
        spools: dict[str, list[str]] = {}
        spool_rank: dict[str, int | None] = {}
        for item in batch:
            if item[0] == "lines":
                for ll in item[1]:
                    src = ll.source
                    if src in spools or (self.tl.sid_of(src) is None and not os.path.isfile(src)) or \
                            (self.tl.sid_of(src) is not None and self.tl.sources[self.tl.sid_of(src)].spool):
                        spools.setdefault(src, []).append(ll.text)
                        spool_rank.setdefault(src, ll.rank)
                    else:
                        names.add(src)
        rechecks = [p for item in batch if item[0] == "recheck" for p in item[1]]
        # a source event's known file is looked at again too: another file with the name
        # (replaced before following began, its bytes read by the engine as history) is a new
        # generation. A name not known yet comes with its lines (a rotated file's old name is
        # not a source: its lines are the old generation's).
        names.update(p for p in rechecks if self.tl.sid_of(p) is not None)
        grew = 0
        if names:
            grew += self.tl.refresh(names)
        if rechecks:
            self.tl.recheck(rechecks)
        for src, texts in spools.items():
            before = self.tl.rows
            self.tl.spool(src, texts, SourceInfo(path=src, kind="exec", exec_rank=spool_rank.get(src)))
            grew += self.tl.rows - before
        for item in batch:
            if item[0] == "rank_map":
                change = self.tl.set_rank_map(item[1])
                if change == "copies":
                    self.post(ViewReady(view_for(self.tl, None, True), None, True))
                elif change == "tags":  # rows already drawn show the ranks they now have
                    self.post(TimelineChanged(self.tl.rows, self.tl.built, retag=True))
        last = {}
        for item in batch:
            if item[0] in ("view", "search"):
                last[item[0]] = item
        if "view" in last:
            self._view = (last["view"][1], last["view"][2])
        gone = self.tl.gone()
        if "view" in last or gone != self._gone:  # a gone source's rows leave the views too
            self._gone = gone
            rank, hide = self._view
            self.post(ViewReady(view_for(self.tl, rank, hide), rank, hide))
        if grew:
            self._changed(force=True)
        for item in batch:
            if item[0] == "levels":
                rows = self.tl.rows
                self.post(LevelsDone(item[1], rows, find_all(self.tl, item[2])))
        if "search" in last:
            _k, query, gen = last["search"]
            if gen == self.search_gen:
                self.post(SearchDone(gen, query, find_all(self.tl, query, lambda: gen != self.search_gen)))
