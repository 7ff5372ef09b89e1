"""The ENOSPC / EMFILE differential: which of the causes that print the same text is it?

"No space left on device" has at least six causes (failure-messages.md C1, B10, C3, C9): blocks
exhausted, inodes exhausted, ext4 root-reserved blocks, deleted-but-open files still holding
blocks (the DeepSpeed FastFileWriter leak, issue #8003), quota (EDQUOT, or ENOSPC on Lustre) and
/dev/shm too small. ``[Errno 24] Too many open files`` (C2) is the per-process fd limit, usually
reached through a leak. ``differential()`` lists each candidate with a verdict (likely, unlikely,
unknown), what was measured and when, and evaluates the signature's checklist conditions against
the same readings. Readings are taken now, after the failure: every result says so.

The candidates and their thresholds are in probes/candidates.py, the checklist metrics in
probes/metrics.py, the bounded du in probes/du.py.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

from denpex_tui.core import bounded
from denpex_tui.core import schema as _schema

from .candidates import LIKELY, UNKNOWN, Candidate, check_command, emfile_candidates, enospc_candidates, rounded
from .metrics import ChecklistResult, evaluate_checklist, find_path, load_checklist, metrics_for, workers
from .readings import Snapshot, iso_time

NOTE = "measured now, not at failure time"


_KIND_BY_ID = {
    "os.enospc": "enospc",
    "os.shm-enospc": "enospc",
    "os.edquot": "enospc",
    "torch.save-write-failed": "enospc",
    "deepspeed.fastfilewriter-fd-leak": "enospc",
    "deepspeed.nvme-offload-enospc": "enospc",
    "deepspeed.aio-file-error": "enospc",
    "deepspeed.swap-short-file": "enospc",
    "deepspeed.swap-assert": "enospc",
    "os.emfile": "emfile",
    "os.enfile": "emfile",
    "torch.dataloader-too-many-open-files": "emfile",
}


def differential_kind(signature_id: str) -> str | None:
    """'enospc', 'emfile', or None when the signature is not about space or file descriptors."""
    sid = signature_id.strip().lower()
    if sid in _KIND_BY_ID:
        return _KIND_BY_ID[sid]
    if any(k in sid for k in ("emfile", "enfile", "too-many-open-files", "fd-limit")):
        return "emfile"
    if any(k in sid for k in ("enospc", "edquot", "quota", "disk-full", "no-space",
                              "write-failed", "fd-leak")):
        return "enospc"
    return None


@dataclass
class Differential:
    signature_id: str
    kind: str
    path: str | None
    measured_at: str
    measured_at_unix: float
    note: str = NOTE
    mount: str | None = None
    fstype: str | None = None
    measured_path: str | None = None  # what statvfs was run on (nearest existing ancestor)
    candidates: list[Candidate] = field(default_factory=list)
    checklist: list[ChecklistResult] = field(default_factory=list)
    metrics: dict[str, float | None] = field(default_factory=dict)
    caveats: list[str] = field(default_factory=list)
    node: str | None = None  # the node whose readings these are (a remote source's name)
    here: bool = True  # the failing path is where it was measured: the readings are of its filesystem
    error_node: str | None = None  # where the error was logged
    measure_command: str | None = None  # what to run there (or here) to measure the path

    def where(self) -> str:
        """What was measured, in words: the path and its mount, or why nothing was."""
        if not self.here:
            return (f"{self.path} is not on this machine: measure it on "
                    f"{self.error_node or 'the node that logged it'}"
                    + (f" with: {self.measure_command}" if self.measure_command else ""))
        if self.measured_path is None:
            return "nothing measured: the error names no path"
        on = f" on {self.mount}" + (f" ({self.fstype})" if self.fstype else "") if self.mount else ""
        return f"measured {self.measured_path}{on} at {self.measured_at}"

    def likely(self) -> list[Candidate]:
        return [c for c in self.candidates if c.verdict == LIKELY]

    def summary(self) -> str:
        lk = self.likely()
        if not self.here:
            return f"not on this machine ({self.note})"
        if lk:
            head = "likely: " + ", ".join(c.title for c in lk)
        else:
            head = "no measured cause stands out"
        return f"{head} ({self.note}, {self.measured_at})"

    def to_json(self) -> dict:
        return {
            "signature": self.signature_id,
            "kind": self.kind,
            "path": self.path,
            "mount": self.mount,
            "fstype": self.fstype,
            "measured_at": self.measured_at,
            "measured_path": self.measured_path,
            "here": self.here,
            "error_node": self.error_node,
            "measure_command": self.measure_command,
            "where": self.where(),
            "note": self.note,
            "caveats": list(self.caveats),
            "candidates": [c.to_json() for c in self.candidates],
            "checklist": [c.to_json() for c in self.checklist],
            "metrics": {k: rounded(v) for k, v in self.metrics.items()},
            "summary": self.summary(),
            "node": self.node,
        }


def _measure_command(path: str | None) -> str | None:
    if not path:
        return None
    # a path a log names: its stat goes through the bounded worker (a dead mount never hangs us)
    d = path if bounded.isdir(path) else os.path.dirname(os.path.abspath(path))
    return check_command("df -h -- {dir} && df -i -- {dir}", dir=d)


def differential(signature_id: str, path: str | None, snapshot: Snapshot, trends=None, *,
                 checklist: list[dict] | None = None, pid: int | None = None,
                 du: bool = True, source=None, error_node: str | None = None) -> "Differential":
    """Evidence for each candidate cause of an ENOSPC- or EMFILE-family finding.

    ``path``: the path named in the error line (a file or directory; ``</torch_...>`` means
    shared memory), or None (then only a path the user named with ``--path``). ``trends``: a
    TrendTracker, for the fd growth per save. ``checklist``: the signature's checklist items;
    default: read from the built-in signature file. ``source``: the ProbeSource of the
    snapshot's node (a remote node's StreamSource for a rank on another node). ``error_node``:
    where the error was logged (named when the path is not where it was measured). Raises
    ValueError for a signature that is neither kind.

    A path that does not exist where it is measured is never answered with a reading of another
    filesystem (its nearest existing ancestor may be a head node's root disk): its candidates
    say "not on this machine: measure it on NODE with: ..." and give the command.
    """
    kind = differential_kind(signature_id)
    if kind is None:
        raise ValueError(f"no ENOSPC/EMFILE differential for signature {signature_id!r}")
    pr = find_path(path, snapshot, source)
    t = snapshot.time
    if pr is not None and pr is not snapshot.path_reading(pr.path) and pr is not snapshot.shm:
        t = time.time()  # measured just now, outside the snapshot
    # the readings are of the failing path's filesystem only if the path, or the directory it
    # names a file in, exists here
    here = True
    if pr is not None and path is not None and not pr.is_shm and pr.exists is False:
        named_dir = os.path.normpath(os.path.dirname(os.path.abspath(path)))
        here = pr.measured_path == named_dir
    metrics = metrics_for(path, snapshot, trends=trends, pid=pid, du=du and here, source=source)
    if not here or pr is None:
        for k in ("path.bytes_free_pct", "path.inodes_free_pct", "path.bytes_reserved_pct",
                  "path.df_du_gap_pct"):
            metrics[k] = None
    d = Differential(signature_id=signature_id, kind=kind, path=path,
                     measured_at=iso_time(t), measured_at_unix=t,
                     mount=pr.mount if pr and here else None, fstype=pr.fstype if pr and here else None,
                     metrics=metrics, here=here, error_node=error_node,
                     measure_command=_measure_command(path or (pr.path if pr else None)))
    d.measured_path = pr.measured_path if pr and here else None
    if getattr(source, "remote", False):
        d.node = source.name  # a remote node's stream
    if not here and kind == "enospc":
        d.caveats.append(d.where() if source is None or not getattr(source, "remote", False) else
                         f"{path} does not exist on node {source.name}: measure it on "
                         f"{error_node or 'the node that logged it'} with: {d.measure_command}")
    if pr is not None and pr.error is not None:
        d.caveats.append(f"the path could not be measured: {pr.error}")
    if kind == "emfile" and not workers(snapshot, pid):
        d.caveats.append("no training process is running here: the process that hit the limit "
                         "has exited, and its fds with it")
    if kind == "emfile":
        d.candidates = emfile_candidates(snapshot, trends, pid, metrics)
    else:
        d.candidates = enospc_candidates(
            signature_id, path, pr if here else None, snapshot, pid, metrics, du and here,
            where=None if here else os.path.dirname(os.path.abspath(path or "/")), source=source)
        if not here:
            for c in d.candidates:
                if c.cause in ("blocks", "inodes", "reserved", "deleted-open"):
                    c.verdict = UNKNOWN
                    c.measured = {}
                    c.evidence = (f"not on this machine: measure it on {error_node or 'the node that logged it'}"
                                  f" with: {c.check if c.cause == 'deleted-open' else d.measure_command}")
    items = checklist if checklist is not None else load_checklist(signature_id)
    d.checklist = evaluate_checklist(items, metrics)
    return d


__all__ = [
    "NOTE",
    "Differential",
    "differential",
    "differential_kind",
    "differential_from_json",
]


def differential_from_json(j: dict[str, Any]):
    _schema.check_schema(j, "differential")
    return Differential(
        signature_id=str(j["signature"]),
        kind=str(j["kind"]),
        path=j.get("path"),
        measured_at=str(j["measured_at"]),
        measured_at_unix=float(j["measured_at_unix"]),
        note=str(j.get("note") or ""),
        mount=j.get("mount"),
        fstype=j.get("fstype"),
        measured_path=j.get("measured_path"),
        candidates=[Candidate(**_schema._init_kwargs(Candidate, c)) for c in j.get("candidates") or []],
        checklist=[ChecklistResult(**_schema._init_kwargs(ChecklistResult, c)) for c in j.get("checklist") or []],
        metrics=dict(j.get("metrics") or {}),
        caveats=list(j.get("caveats") or []),
        here=bool(j.get("here", True)),
        error_node=j.get("error_node"),
        measure_command=j.get("measure_command"),
    )
