"""The metrics a signature's checklist conditions read, measured from a probe snapshot, and
the checklist evaluated against them (docs/signature-format.md lists the metrics).

``metrics_for`` finds the failing path's reading (a path already in the snapshot, else read
now; ``</torch_...>`` names are shared memory), the worst watched worker's fd and
deleted-open figures, and the fd growth per checkpoint save from the trends.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from denpex_tui.core.conditions import METRICS, parse_condition

from .du import df_du_gap
from .readings import PathReading, ProcessReading, Snapshot
from .sampler import SHM, read_path

__all__ = ["ChecklistResult", "metrics_for", "find_path", "is_shm_name", "workers", "load_checklist",
           "evaluate_checklist"]


@dataclass
class ChecklistResult:
    text: str
    condition: str | None
    result: bool | None  # None: not measurable here (or no condition)
    error: str | None = None

    def to_json(self) -> dict:
        return {"text": self.text, "condition": self.condition, "result": self.result,
                "error": self.error}



def find_path(path: str | None, snapshot: Snapshot, source=None) -> PathReading | None:
    if path is None:  # only a path the user named; any other would be another filesystem's reading
        for p in snapshot.paths:
            if not p.is_shm and "--path" in p.why:
                return p
        return None
    if is_shm_name(path):
        return snapshot.shm
    ap = os.path.abspath(path)
    for p in snapshot.paths:
        if p.path == ap or p.measured_path == ap:
            return p
    fresh = source.read_path(ap) if source is not None else read_path(ap)
    # per-filesystem readings of the snapshot (deleted-open bytes held there) still apply
    for p in snapshot.paths:
        if p.mount is not None and p.mount == fresh.mount and p.source == fresh.source:
            if p.deleted_open_bytes is not None:
                fresh.deleted_open_bytes = p.deleted_open_bytes
                break
    return fresh


def is_shm_name(path: str) -> bool:
    """``</torch_...>`` (ATen shared-memory names) or anything under /dev/shm."""
    p = path.strip()
    if p.startswith("<") and p.endswith(">"):
        return True
    if p.startswith("/torch_") or p.startswith("/memfd:"):
        return True
    return p == SHM or p.startswith(SHM + "/")


def workers(snapshot: Snapshot, pid: int | None) -> list[ProcessReading]:
    if pid is not None:
        return [p for p in snapshot.processes if p.pid == pid]
    return [p for p in snapshot.processes if p.role != "launcher"]


def metrics_for(path: str | None, snapshot: Snapshot, *, trends=None, pid: int | None = None,
                du: bool = True, source=None) -> dict[str, float | None]:
    """The checklist metrics for ``path`` (docs/signature-format.md), None where not measured.

    proc.* metrics are of ``pid`` when given, else of the worst watched worker (highest fd use,
    most deleted-open bytes, fastest fd growth per save). path.df_du_gap_pct walks the path's
    filesystem (bounded; None when capped). ``source``: the ProbeSource the snapshot came from
    (a remote node's: its paths and du, never this machine's); default this machine."""
    m: dict[str, float | None] = {k: None for k in METRICS}
    pr = find_path(path, snapshot, source)
    if pr is not None and pr.error is None:
        m["path.bytes_free_pct"] = pr.bytes_free_pct
        m["path.inodes_free_pct"] = pr.inodes_free_pct
        m["path.bytes_reserved_pct"] = pr.bytes_reserved_pct
        if du:
            m["path.df_du_gap_pct"] = df_du_gap(pr, source)[0]
    shm = snapshot.shm
    if shm is not None and shm.error is None:
        m["shm.bytes_free_pct"] = shm.bytes_free_pct
    procs = workers(snapshot, pid)
    vals = [p.fd_used_pct for p in procs if p.fd_used_pct is not None]
    m["proc.fd_used_pct"] = max(vals) if vals else None
    dels = [p.deleted_open_bytes for p in procs if p.deleted_open_bytes is not None]
    m["proc.deleted_open_bytes"] = float(max(dels)) if dels else None
    if trends is not None:
        gs = []
        for p in procs:
            g = trends.fd_growth_per_save(p.pid, p.create_time)
            if g is not None:
                gs.append(g)
        m["proc.fd_growth_per_save"] = max(gs) if gs else None
    return m


def load_checklist(signature_id: str) -> list[dict]:
    """The checklist items of a signature, from the catalog (the one loader that validates
    packs and applies the user's overrides); [] when the id is unknown."""
    from denpex_tui.core.catalog import load_catalog

    global _CATALOG
    if _CATALOG is None:
        _CATALOG = load_catalog()
    sig = _CATALOG.get(signature_id)
    if sig is None:
        return []
    return [{"text": c.text, "condition": c.condition} for c in sig.checklist]


_CATALOG = None


def evaluate_checklist(items: list[dict], metrics: dict) -> list[ChecklistResult]:
    out = []
    for it in items:
        cond = it.get("condition")
        if not cond:
            out.append(ChecklistResult(it["text"], None, None))
            continue
        try:
            c = parse_condition(cond)
        except ValueError as e:
            out.append(ChecklistResult(it["text"], str(cond), None, str(e)))
            continue
        out.append(ChecklistResult(it["text"], cond, c.evaluate(metrics)))
    return out
