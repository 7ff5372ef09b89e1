"""The engine's events, batched for the screen.

``feed()`` runs as the app's async worker: it iterates ``Engine.run()`` and posts one
:class:`~denpex_tui.app.messages.EngineBatch` at most every ``flush_s`` (100 ms) while events
flow, and nothing at all while the job is quiet (no timer ticks, no wake-ups); the history's end
and the final diagnosis are posted at once. The job summary
(ranks, nodes, sources, last lines) is computed in the engine's parse thread through
``Engine.call``, so the screen never reads the job while the parser changes it.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, Callable

from denpex_tui.live.engine import Engine
from denpex_tui.live.events import HistoryDone, IncidentEvent, LinesEvent

from .messages import EngineBatch, EngineDone
from .model import JobSummary

__all__ = ["feed", "summarize"]

SAVE_HINTS = ("checkpoint", "save")


def summarize(engine: Engine, pairs: set[tuple], seen_markers: set[tuple]) -> JobSummary:
    """Runs in the parse thread (``Engine.call``)."""
    job = engine.job
    s = JobSummary()
    srcs = job.sources()
    s.sources = len(srcs)
    names = job.node_names()
    ranks: set[int] = set()
    for src in srcs:
        s.kinds[src.path] = src.kind
        s.lines += src.lines
        ranks.update(src.ranks)
        if src.kind in ("rank-file", "exec") and len(src.ranks) == 1:
            s.rank_sources.setdefault(src.ranks[0], []).append(src.path)
        for r in src.ranks:
            if src.node and (src.kind != "console" or r not in s.rank_node):
                s.rank_node[r] = src.node
    s.nodes = sorted({n for n in names.values() if n}) or ([] if not srcs else ["(this node)"])
    by_attempt = job.ranks_by_attempt()
    if by_attempt:
        s.attempt = max(by_attempt)
        ranks.update(by_attempt[s.attempt])
    for r in job.results.values():  # the newest line of any source, ranked or not (a plain log's age)
        for ll in r.last_lines:
            try:
                t = ll.time.timestamp() if ll.time is not None else None
            except (OverflowError, OSError, ValueError):
                t = None
            if t is not None and (s.last_any is None or t > s.last_any):
                s.last_any = t
    for (attempt, rank), ll in job.last_lines().items():
        if attempt != s.attempt or ll.time is None:
            continue
        try:
            t = ll.time.timestamp()
        except (OverflowError, OSError, ValueError):
            continue
        s.last_log[rank] = max(t, s.last_log.get(rank, t))
    s.ranks = job.ranks()  # the job's own count, as scan says it
    s.findings = job.findings()
    s.incidents = list(engine.incidents)
    s.failure_entries = job.failure_entries()
    s.first_errors = job.first_errors()
    s.attempts = len(by_attempt) if by_attempt else 1
    for r in job.results.values():  # local ranks the history showed (no line objects for it)
        nk = r.info.node_key
        if r.info.local_rank is not None and r.info.file_rank is None:
            pairs.add((nk, r.info.local_rank))
        for keys in r.keys_seen.values():
            pairs.update((nk, n) for kind, n in keys if kind == "l")
    for key in pairs:
        g = engine.rank_of(("local", key[0], key[1]))
        if g is not None:
            s.rank_map[key] = g
    for m in job.markers():
        mk = (m.path, m.line)
        if mk in seen_markers or not any(h in m.signature for h in SAVE_HINTS):
            continue
        seen_markers.add(mk)
        t = None
        if m.time is not None:
            try:
                t = m.time.timestamp()
            except (OverflowError, OSError, ValueError):
                t = None
        s.markers.append((m.text, m.path, m.line, m.rank, t))
    return s


async def feed(engine: Engine, post: Callable[[Any], Any], *, flush_s: float = 0.1, summary_s: float = 0.5) -> None:
    loop = asyncio.get_running_loop()
    agen = engine.run().__aiter__()
    pending: list[Any] = []
    pairs: set[tuple] = set()
    markers: set[tuple] = set()
    nxt: asyncio.Future | None = None
    deadline: float | None = None
    dirty = False
    last_summary = -1e9
    error: str | None = None

    async def flush(final: bool = False) -> None:
        nonlocal pending, dirty, last_summary, deadline
        summary = None
        if dirty and (final or loop.time() - last_summary >= summary_s):
            summary = await engine.call(summarize, engine, set(pairs), markers)
            last_summary = loop.time()
            dirty = False
        if pending or summary is not None:
            post(EngineBatch(pending, summary))
        pending = []
        # A summary that was too soon is owed: come back for it, even if nothing else arrives.
        deadline = (last_summary + summary_s) if dirty else None

    try:
        while True:
            if nxt is None:
                nxt = asyncio.ensure_future(agen.__anext__())
            timeout = None if deadline is None else max(0.0, deadline - loop.time())
            done, _ = await asyncio.wait({nxt}, timeout=timeout)
            if nxt in done:
                try:
                    ev = nxt.result()
                except StopAsyncIteration:
                    nxt = None
                    break
                nxt = None
                pending.append(ev)
                if isinstance(ev, LinesEvent):
                    for ln in ev.lines:
                        if ln.rank is None and ln.local is not None:
                            pairs.add((ln.node_key, ln.local))
                dirty = True
                if isinstance(ev, HistoryDone) or (isinstance(ev, IncidentEvent) and not ev.incident.provisional):
                    # the history's end (the view's merge starts from it) and the final
                    # diagnosis are not held for the batch window, and come with the job's
                    # summary as of them: the header stops counting the files found when the
                    # reading ends, so a summary owed from before said "7 sources" of 9 for a frame
                    await flush(final=True)
                    continue
                if deadline is None:
                    deadline = loop.time() + flush_s
                continue
            await flush()
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # shown on screen, never a traceback
        error = f"{type(exc).__name__}: {exc}"
    finally:
        if nxt is not None:
            nxt.cancel()
            nxt.add_done_callback(lambda f: f.cancelled() or f.exception())  # retrieved: no warning
        engine.stop()
    try:
        await flush(final=True)
    finally:
        post(EngineDone(error))


def common_root(paths: list[str]) -> str | None:
    """The folder the followed paths share (for short source names)."""
    dirs = []
    for p in paths:
        ap = os.path.abspath(p)
        dirs.append(ap if os.path.isdir(ap) else os.path.dirname(ap))
    if not dirs:
        return None
    try:
        return os.path.commonpath(dirs)
    except ValueError:
        return None
