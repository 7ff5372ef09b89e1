"""``denpex watch --hosts/--slurm-job/--pods [--probe-cmd T]``: the probes of other nodes.

:class:`RemoteProbeLoop` has the interface of :class:`~.probing.ProbeLoop` (``run(post)``,
``lines``, ``measure``, ``stop``) and is used in its place: its thread runs the
:class:`~denpex_tui.probes.fleet.Fleet` (the transports' pipes, never a socket) and posts a
:class:`ProbeUpdate` with the merged snapshot of every node (entries tagged by node, the nodes'
statuses in ``snapshot.nodes``) and each node's trends keyed ``(node, path)`` / ``(node, pid)``.
"Measure this finding" computes the differential from the failing rank's own node: the node the
log names, else the node whose probe sees a process of that rank.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Callable

from denpex_tui.probes.differential import differential, differential_kind
from denpex_tui.probes.metrics import metrics_for
from denpex_tui.probes.readings import ProcessReading, Snapshot
from denpex_tui.probes.skew import compare
from denpex_tui.probes.trends import TrendTracker

from .messages import Measured, ProbeUpdate

__all__ = ["RemoteProbeLoop", "group_by_node", "rank_processes", "pick_node", "skew_note"]

MAX_COMPARED = 32  # the earliest findings of other nodes compared with the initiating one


def _worst(paths, procs) -> float:
    vals = [-1.0]
    for p in paths:
        for free in (p.bytes_free_pct, p.inodes_free_pct):
            if free is not None:
                vals.append(100.0 - free)
    vals.extend(p.fd_used_pct for p in procs if p.fd_used_pct is not None)
    return max(vals)


_BAD = {"no-answer": 3, "exited": 3, "other-schema": 3, "garbage": 2, "late": 1, "connecting": 1}


def group_by_node(snapshot: Snapshot) -> list[tuple[str, dict | None, list, list]]:
    """(node, its status entry, its paths, its processes) for a merged snapshot, the worst node
    first: a node that is down, then the one closest to a limit (bytes, inodes, fds)."""
    nodes = {n["node"]: n for n in getattr(snapshot, "nodes", None) or []}
    groups: dict[str, tuple[list, list]] = {n: ([], []) for n in nodes}
    for p in snapshot.paths:
        groups.setdefault(p.node or "?", ([], []))[0].append(p)
    for p in snapshot.processes:
        groups.setdefault(p.node or "?", ([], []))[1].append(p)
    out = [(n, nodes.get(n), paths, procs) for n, (paths, procs) in groups.items()]
    out.sort(key=lambda g: (-_BAD.get((g[1] or {}).get("status", "ok"), 0), -_worst(g[2], g[3]), g[0]))
    return out


def rank_processes(snapshot: Snapshot | None) -> dict[int, ProcessReading]:
    """Rank -> its worker process in the snapshot (the pid, fds and node of the rank table)."""
    out: dict[int, ProcessReading] = {}
    if snapshot is None:
        return out
    for p in snapshot.processes:
        if p.rank is not None and p.role != "launcher" and (p.rank not in out or p.readable):
            out[p.rank] = p
    return out


def pick_node(fleet, node: str | None, rank: int | None) -> str | None:
    """The fleet node of a finding: the log's node name (exact, or its short name), else the
    node whose probe sees a process of that rank."""
    if node:
        if node in fleet.nodes:
            return node
        short = node.split(".")[0]
        for n in fleet.nodes:
            if n.split(".")[0] == short:
                return n
    if rank is not None:
        for n, st in fleet.nodes.items():
            snap = st.source.snapshot()
            if snap is not None and any(p.rank == rank for p in snap.processes):
                return n
    return None


def _match(node: str | None, names) -> str | None:
    if not node:
        return None
    if node in names:
        return node
    short = node.split(".")[0]
    return next((n for n in names if n.split(".")[0] == short), None)


def skew_note(incident, offsets: dict | None) -> str | None:
    """A warning when the initiating rank's lead over a failure on another node is within the
    nodes' clock uncertainty, or when correcting the clocks reverses the order; else None."""
    if not offsets or incident is None or incident.initiating is None:
        return None
    a = incident.initiating
    na = _match(a.node, offsets)
    if na is None or a.time is None or a.time_approx:
        return None
    others = sorted((f for f in list(incident.same_cause) + list(incident.collateral)
                     if f.time is not None and not f.time_approx and f.node),
                    key=lambda f: f.time)[:MAX_COMPARED]
    for f in others:
        nb = _match(f.node, offsets)
        if nb is None or nb == na:
            continue
        o = compare(offsets, na, a.time.timestamp(), nb, f.time.timestamp())
        who = f"rank {a.rank} on {na} and rank {f.rank} on {nb}"
        if o.uncertain:
            return f"clock skew: {who} failed {o.reason}: which failed first is uncertain"
        if o.first != na:
            return (f"clock skew: after correcting the clocks rank {f.rank} on {nb} failed "
                    f"before rank {a.rank} on {na} ({o.reason})")
    return None


class RemoteProbeLoop:
    def __init__(self, specs: list, *, interval: float = 2.0, answer_timeout: float = 20.0,
                 fleet_factory: Callable[[], Any] | None = None) -> None:
        self.specs = specs
        self.interval = interval
        self.answer_timeout = answer_timeout
        self.fleet_factory = fleet_factory
        self.requests: queue.Queue = queue.Queue()
        self.stopped = threading.Event()
        self.fleet = None

    def lines(self, items) -> None:  # remote probes read their own node's logs (--logs there)
        pass

    def measure(self, key: Any, signature: str, path: str | None, pid: int | None = None,
                rank: int | None = None, node: str | None = None) -> None:
        self.requests.put(("measure", key, signature, path, pid, rank, node))

    def stop(self) -> None:
        self.stopped.set()

    def run(self, post: Callable[[Any], Any]) -> None:
        from denpex_tui.probes.fleet import Fleet

        fleet = self.fleet = (self.fleet_factory() if self.fleet_factory else
                              Fleet(self.specs, interval=self.interval, answer_timeout=self.answer_timeout))
        trends: dict[str, TrendTracker] = {}
        seen: dict[str, int] = {}
        fleet.start()
        next_post = 0.0
        pending: list = []
        try:
            while not self.stopped.is_set():
                fleet.step(0.2)
                for n, st in fleet.nodes.items():
                    snap = st.source.snapshot()
                    if snap is not None and seen.get(n) != st.source.snapshots:
                        seen[n] = st.source.snapshots
                        trends.setdefault(n, TrendTracker()).ingest(snap)
                now = time.monotonic()
                if now >= next_post:
                    next_post = now + min(1.0, self.interval)
                    post(self.update(fleet, trends))
                while True:
                    try:
                        pending.append((time.monotonic(), self.requests.get_nowait()))
                    except queue.Empty:
                        break
                keep = []
                for at, req in pending:  # a node with no snapshot yet: ask again, for a while
                    m = self._measure(fleet, trends, *req[1:])
                    if m is None and time.monotonic() - at < self.answer_timeout:
                        keep.append((at, req))
                    else:
                        post(m if m is not None else Measured(req[1], {}, None))
                pending = keep
        finally:
            fleet.stop()

    @staticmethod
    def update(fleet, trends: dict[str, TrendTracker]) -> ProbeUpdate:
        snap = fleet.merged()
        snap.nodes = fleet.node_json()  # type: ignore[attr-defined]
        snap.offsets = fleet.skew.offsets()  # type: ignore[attr-defined]  # a copy, for the UI thread
        path_trends, proc_trends = {}, {}
        for n, tr in trends.items():
            path_trends.update({(n, t.path): t for t in tr.path_trends()})
            proc_trends.update({(n, t.pid): t for t in tr.process_trends()})
        return ProbeUpdate(snap, path_trends, proc_trends)

    @staticmethod
    def _measure(fleet, trends, key, sig, path, pid, rank, node) -> Measured | None:
        """None while the rank's node is not known yet (no snapshot from it)."""
        n = pick_node(fleet, node, rank)
        src = fleet.source(n) if n else None
        snap = src.snapshot() if src else None
        if snap is None:
            return None
        if pid is None and rank is not None:
            for p in snap.processes:
                if p.rank == rank and p.role != "launcher":
                    pid = p.pid
                    break
        tr = trends.get(n)
        try:
            metrics = metrics_for(path, snap, trends=tr, pid=pid, source=src)
            diff = differential(sig, path, snap, tr, pid=pid, source=src) if differential_kind(sig) else None
        except Exception:  # a reading that cannot be evaluated must not end the probes
            return Measured(key, {}, None)
        if diff is not None:
            diff.caveats.insert(0, f"measured on node {n}, the rank's own node "
                                   f"(probe stream, {snap.host})")
        return Measured(key, metrics, diff)
