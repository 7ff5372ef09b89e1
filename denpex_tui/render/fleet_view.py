"""Human-readable view of ``denpex probe --hosts/--slurm-job/--pods``: one line per node (its
status, clock offset), then each node's readings with the single-node view's sections, the
worst node first. Text from nodes passes through ``probe_view.safe`` like any other."""

from __future__ import annotations

from typing import IO

from denpex_tui.probes.readings import Snapshot

from .probe_view import Line, build_lines, safe

STATUS_STYLE = {"ok": "ok", "connecting": "warn", "late": "warn", "garbage": "bad",
                "no-answer": "bad", "exited": "bad", "other-schema": "bad"}


def node_worst(snap: Snapshot | None) -> float:
    """How close a node is to a limit: the highest used % of its paths (bytes, inodes) and
    processes (fds); -1 without readings."""
    if snap is None:
        return -1.0
    vals = [-1.0]
    for p in snap.paths:
        for free in (p.bytes_free_pct, p.inodes_free_pct):
            if free is not None:
                vals.append(100.0 - free)
    vals.extend(p.fd_used_pct for p in snap.processes if p.fd_used_pct is not None)
    return max(vals)


def build_fleet_lines(fleet) -> list[Line]:
    nodes = fleet.node_json()
    lines: list[Line] = [[(f"denpex probe  {len(nodes)} nodes", "title")], []]
    bad = [n for n in nodes if n["status"] != "ok"]
    lines.append([("Nodes", "title"), (f"  {len(nodes) - len(bad)} ok, {len(bad)} not", "dim")])
    for n in nodes:
        clock = n["clock"]
        off = "" if not clock else (f"  clock {clock['offset_s'] * 1000:+.0f} ms"
                                    + ("" if clock["uncertainty_s"] is None
                                       else f" ±{clock['uncertainty_s'] * 1000:.0f}"))
        lines.append([(f"  {safe(n['node'], 60):<16}", "key"),
                      (f"{n['status']:<13}", STATUS_STYLE.get(n["status"], "")),
                      (safe(n["detail"], 200), "dim"), (off, "dim")])
    res = fleet.skew.resolution()
    if fleet.skew.offsets():
        lines.append([("  clocks: ", "dim"),
                      ("failures on two nodes closer than "
                       f"{res * 1000:.0f} ms cannot be ordered by their timestamps" if res is not None
                       else "too few samples to bound the nodes' clock offsets", "dim")])
    order = sorted(fleet.nodes.values(), key=lambda st: -node_worst(st.source.snapshot()))
    for st in order:
        snap = st.source.snapshot()
        if snap is None:
            continue
        lines.append([])
        lines.append([(f"== node {safe(st.node, 60)}", "title")])
        lines.extend(build_lines(snap)[2:])
    return lines


def render(fleet, file: IO | None = None, color: bool | None = None) -> None:
    from .probe_view import write_lines

    write_lines(build_fleet_lines(fleet), file, color)


__all__ = ["render", "build_fleet_lines", "node_worst"]
