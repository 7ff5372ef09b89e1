"""``denpex scan --follow``: the live engine, headless, until SIGINT/SIGTERM (exit 0).

With ``--json``: JSON Lines events (``finding``, ``incident``, ``source``, ``process``,
``stall``, ``stall-cleared``), flushed one per line: what a user pipes into an alerting hook.
Without: one readable line per event.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from typing import Any

from denpex_tui.core.catalog import load_catalog
from denpex_tui.core.text import safe_json, safe_str

from denpex_tui.live.engine import Engine
from denpex_tui.live.events import LinesEvent
from denpex_tui.live.execsource import kill_all
from denpex_tui.live.sources import SourceEvent
from denpex_tui.live.stall import StallCleared, StallEvent
from denpex_tui.live.tailer import TailOptions


def event_dict(engine: Engine, ev: Any) -> dict[str, Any] | None:
    if isinstance(ev, LinesEvent):
        return None
    if isinstance(ev, StallEvent):
        return {"event": "stall", "rank": engine.rank_of(ev.rank), "node": engine.node_name(ev.node),
                "silent_s": round(ev.silent_s, 1), "reason": ev.reason}
    if isinstance(ev, StallCleared):
        return {"event": "stall-cleared", "rank": engine.rank_of(ev.rank)}
    if isinstance(ev, SourceEvent):
        return {"event": "source", "path": safe_str(ev.path), "state": ev.state, "detail": safe_str(ev.detail)}
    if hasattr(ev, "to_dict"):
        return ev.to_dict()
    return None


def readable(d: dict[str, Any]) -> str:
    kind = d["event"]
    if kind == "finding":
        return (f"[finding] rank {d['rank'] if d['rank'] is not None else '?'} {d['signature']} ({d['role']}) "
                f"{d['path']}:{d['line']}: {d['text']}")
    if kind == "incident":
        return f"[incident] {d['summary']} (confidence {d['confidence']})"
    if kind == "source":
        return f"[source] {d['state']}: {d['path']}" + (f" ({d['detail']})" if d.get("detail") else "")
    if kind == "process":
        return f"[process] pid {d['pid']} rank {d['rank']} {d['state']}"
    if kind == "stall":
        return f"[stall] rank {d['rank']} silent for {d['silent_s']:.0f} s ({d.get('reason', '')})"
    if kind == "stall-cleared":
        return f"[stall-cleared] rank {d['rank']} logs again"
    return json.dumps(d)


async def _follow(engine: Engine, as_json: bool) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    # SIGHUP (the terminal or the ssh session went away) and SIGPIPE (the reader of our
    # output went away) end the engine as SIGTERM does: its --exec commands are stopped
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE)
    for sig in sigs:
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError, ValueError):
            pass
    out = sys.stdout

    async def consume() -> None:
        events = engine.run()
        try:
            async for ev in events:
                d = event_dict(engine, ev)
                if d is None:
                    continue
                d = safe_json(d)  # node names, paths, warnings: every string through the one door
                out.write((json.dumps(d, ensure_ascii=False) if as_json else readable(d)) + "\n")
                out.flush()
        finally:
            await events.aclose()  # the engine's own clean-up (commands stopped, files closed)

    task = asyncio.create_task(consume())
    waiter = asyncio.create_task(stop.wait())
    await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    _quiet_signals(loop, sigs)
    engine.stop()
    waiter.cancel()
    try:
        await asyncio.wait_for(task, timeout=5)
    except (asyncio.TimeoutError, asyncio.CancelledError):
        task.cancel()
    except BrokenPipeError:
        pass


def _quiet_signals(loop, sigs) -> None:
    """Stopping: a second signal changes nothing. The loop's handlers go now, while its
    self-pipe is open (a signal as ``asyncio.run`` closes the loop was written to the half-closed
    pipe: "Exception ignored when trying to write to the signal wakeup fd"), and the signals
    are ignored until the exit (a write to a closed pipe raises BrokenPipeError, handled)."""
    for sig in sigs:
        try:
            loop.remove_signal_handler(sig)
            signal.signal(sig, signal.SIG_IGN)
        except (NotImplementedError, RuntimeError, ValueError):
            pass


def run_follow(args, sig_dirs: list[str]) -> int:
    from denpex_tui.commands.common import UsageError

    if not args.paths and not args.exec_cmds:
        raise UsageError("--follow needs a PATH or an --exec command")
    catalog = load_catalog(sig_dirs)
    for p in catalog.problems:
        print(f"denpex: signatures: {safe_str(p)}", file=sys.stderr)
    if args.max_stat_rate <= 0:
        raise UsageError("--max-stat-rate must be a positive number of calls per second")
    if args.max_files < 1:
        raise UsageError("--max-files must be at least 1")
    engine = Engine(list(args.paths), catalog, execs=list(args.exec_cmds or []),
                    tailer_options=TailOptions(max_meta_per_s=args.max_stat_rate, max_files=args.max_files))
    try:
        asyncio.run(_follow(engine, args.json))
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:
        pass
    finally:
        kill_all(signal.SIGKILL)  # whatever the engine could not stop in time
        try:
            sys.stdout.flush()
        except BrokenPipeError:  # the reader is gone: nothing more to say, quietly
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0
