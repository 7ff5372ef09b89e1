"""What ``denpex watch`` is asked to show (:class:`WatchOptions`) and the live engine it
runs over (:func:`watch_engine`). No Textual here: the engine is made, and its history
pass started, before the UI is imported (:func:`denpex_tui.app.factory.make_app`), so the
reading overlaps that import too."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from denpex_tui.core.catalog import Catalog
from denpex_tui.live.engine import Engine
from denpex_tui.live.tailer import TailOptions

__all__ = ["WatchOptions", "watch_engine"]


@dataclass
class WatchOptions:
    paths: list[str] = field(default_factory=list)
    execs: list[str] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)
    probe_paths: list[str] = field(default_factory=list)
    theme: str | None = None
    processes: bool = True  # the engine's process table (exits on the timeline)
    probes: bool = True
    discover: bool | None = None
    keep_lines: int = 1000  # live lines per chunk from the engine (history: the timeline reads the files back)
    notice: str = ""
    root: str | None = None
    clock: Callable[[], float] = time.time
    started: float | None = None  # when the session began by ``clock`` (watch: the process start)
    probe_interval: float = 5.0
    max_stat_rate: float = 500.0  # the tailer's cap on metadata calls per second
    max_files: int = 10000  # the tailer's cap on followed files (live/filecap.py)
    all_users: bool = False  # follow other users' training processes too (issue 14)
    demo_root: str | None = None  # watch --demo: its checkpoint disk is the demo's simulated one
    notify: bool = False  # bell + OSC 9 desktop notification when the diagnosis changes
    quiet_s: float = 30.0  # no new log line for this long: the job is quiet, clocks show minutes
    probe_specs: list | None = None  # other nodes' probes (transports.ChannelSpec): app/remote.py
    probe_wait: float = 20.0  # seconds for a node's first snapshot before it counts as no answer


def watch_engine(options: WatchOptions, catalog: Catalog) -> Engine:
    """The live engine over the options' paths, with the line index the timeline reads."""
    return Engine(options.paths, catalog, execs=options.execs, processes=options.processes,
                  keep_lines=options.keep_lines, index=True,
                  tailer_options=TailOptions(max_meta_per_s=options.max_stat_rate, max_files=options.max_files))
