"""A finished job, replayed to the app as a fixed sequence of engine events.

Screenshots and snapshot tests need the same screen every time, however busy the machine is:
:func:`collect` runs the real engine over the finished files until its history pass is done and
nothing is left unread, closes what is still open, and :class:`ReplayEngine` hands the app the
very same events (the findings, the history's line indexes, the final incident).
Everything the app asks of an engine (``run``, ``call``, ``job``, ``matcher``, ``rank_of``, ...)
is the real engine's answer.
"""

from __future__ import annotations

import asyncio
import copy
import time
from typing import Any, AsyncIterator

from denpex_tui.core.catalog import Catalog
from denpex_tui.live.engine import Engine
from denpex_tui.live.events import FindingEvent, HistoryDone, IncidentEvent

__all__ = ["ReplayEngine", "collect"]


class ReplayEngine:
    def __init__(self, engine: Engine, events: list[Any]) -> None:
        self.engine = engine
        self.events = events
        self._stop = asyncio.Event()

    def __getattr__(self, name: str) -> Any:  # job, matcher, catalog, incidents, rank_of, node_name
        return getattr(self.engine, name)

    async def run(self) -> AsyncIterator[Any]:
        self._stop = asyncio.Event()
        for ev in self.events:
            # the view takes the history's indexes over: each app gets its own copy
            yield copy.deepcopy(ev) if isinstance(ev, HistoryDone) else ev
        await self._stop.wait()  # like a live engine on a quiet job: no end, no events

    def stop(self) -> None:
        self._stop.set()

    async def call(self, fn, *args):
        return fn(*args)


async def collect(paths: list[str], catalog: Catalog, *, keep_lines: int = 5000, quiet_s: float = 0.5,
                  timeout_s: float = 120.0) -> ReplayEngine:
    """Run the live engine over finished logs until every file's history is parsed and no
    event came for ``quiet_s``; then close what is still open (:meth:`Engine.finish`), so the
    events do not depend on how busy the machine was."""
    engine = Engine(paths, catalog, processes=False, keep_lines=keep_lines, polite=False, index=True)
    findings, incidents, history = [], None, None

    def take(ev: Any) -> None:
        nonlocal incidents, history
        if isinstance(ev, FindingEvent):
            findings.append(ev)
        elif isinstance(ev, IncidentEvent):
            incidents = ev
        elif isinstance(ev, HistoryDone):
            history = ev

    agen = engine.run().__aiter__()
    t_end = time.monotonic() + timeout_s
    try:
        while True:
            if time.monotonic() >= t_end:
                raise TimeoutError(f"the engine did not read {paths} within {timeout_s:.0f} s")
            try:
                ev = await asyncio.wait_for(agen.__anext__(), timeout=quiet_s)
            except asyncio.TimeoutError:
                if history is not None and await engine.call(engine.unread_bytes) == 0:
                    break
                continue
            except StopAsyncIteration:
                break
            take(ev)
        for ev in await engine.call(engine.finish):
            take(ev)
    finally:
        engine.stop()
        await agen.aclose()
    findings.sort(key=lambda e: (e.finding.path, e.finding.line, e.finding.signature))
    events: list[Any] = [*findings]
    if history is not None:
        events.append(history)
    if incidents is not None:
        events.append(IncidentEvent(engine.incidents[-1] if engine.incidents else incidents.incident,
                                    list(engine.incidents) or incidents.incidents))
    return ReplayEngine(engine, events)
