"""A finished job, replayed to the app as a fixed sequence of engine events.

The live engine reads a job's files with several threads, so the order in which history lines
of different files arrive is not fixed. Screenshots and snapshot tests need the same screen
every time: :func:`collect` runs the real engine over the finished files until it is quiet,
and :class:`ReplayEngine` hands the app the very same events, lines in log-time order.
Everything the app asks of an engine (``run``, ``call``, ``job``, ``matcher``, ``rank_of``, ...)
is the real engine's answer.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, AsyncIterator

from denpex_tui.core.catalog import Catalog
from denpex_tui.live.engine import Engine, FindingEvent, IncidentEvent, LinesEvent

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
            yield ev
        await self._stop.wait()  # like a live engine on a quiet job: no end, no events

    def stop(self) -> None:
        self._stop.set()

    async def call(self, fn, *args):
        return fn(*args)


def _ts(t) -> float | None:
    try:
        return t.timestamp() if t is not None else None
    except (OverflowError, OSError, ValueError):
        return None


def _timeline(lines: list, findings: list) -> list:
    """Lines in log-time order, as they would have arrived live. Within a file, time never
    goes backwards; a line without a timestamp takes the one of the line before it (or the
    file's first one); a file with no timestamp at all (a stderr traceback) takes the time the
    engine gave its first finding."""
    from .lineinfo import line_facts

    first_finding: dict[str, float] = {}
    for f in findings:
        t = _ts(f.time)
        if t is not None and t < first_finding.get(f.path, float("inf")):
            first_finding[f.path] = t
    keyed = []
    by_file: dict[str, list] = {}
    for ln in lines:
        by_file.setdefault(ln.source, []).append(ln)
    for source, lns in by_file.items():
        lns.sort(key=lambda ln: ln.line)
        stamps = [line_facts(ln.text).time for ln in lns]
        first = next((t for t in stamps if t is not None), None)
        prev = first if first is not None else first_finding.get(source, float("inf"))
        for ln, t in zip(lns, stamps):
            if t is not None and t > prev:  # never backwards within a file (a report's "time :")
                prev = t
            keyed.append((prev, source, ln.line, ln))
    keyed.sort(key=lambda k: k[:3])
    return [k[3] for k in keyed]


async def collect(paths: list[str], catalog: Catalog, *, keep_lines: int = 5000, quiet_s: float = 0.5,
                  timeout_s: float = 120.0) -> ReplayEngine:
    """Run the live engine over finished logs until every file's history is parsed and no
    event came for ``quiet_s``; then close what is still open (:meth:`Engine.finish`), so the
    events do not depend on how busy the machine was."""
    engine = Engine(paths, catalog, processes=False, keep_lines=keep_lines, polite=False)
    lines, findings, incidents = [], [], None
    others: list[Any] = []

    def take(ev: Any) -> None:
        nonlocal incidents
        if isinstance(ev, LinesEvent):
            lines.extend(ev.lines)
        elif isinstance(ev, FindingEvent):
            findings.append(ev)
        elif isinstance(ev, IncidentEvent):
            incidents = ev
        else:
            others.append(ev)

    agen = engine.run().__aiter__()
    t_end = time.monotonic() + timeout_s
    try:
        while True:
            if time.monotonic() >= t_end:
                raise TimeoutError(f"the engine did not read {paths} within {timeout_s:.0f} s")
            try:
                ev = await asyncio.wait_for(agen.__anext__(), timeout=quiet_s)
            except asyncio.TimeoutError:
                if engine.processors and await engine.call(engine.unread_bytes) == 0:
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
    lines = _timeline(lines, engine.job.findings())
    findings.sort(key=lambda e: (e.finding.path, e.finding.line, e.finding.signature))
    events: list[Any] = [LinesEvent(lines, history=True), *findings]
    if incidents is not None:
        events.append(IncidentEvent(engine.incidents[-1] if engine.incidents else incidents.incident,
                                    list(engine.incidents) or incidents.incidents))
    return ReplayEngine(engine, events)
