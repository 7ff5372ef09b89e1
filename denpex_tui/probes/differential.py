"""The ENOSPC / EMFILE differential: which of the causes that print the same text is it?

"No space left on device" has at least six causes (failure-messages.md C1, B10, C3, C9): blocks
exhausted, inodes exhausted, ext4 root-reserved blocks, deleted-but-open files still holding
blocks (the DeepSpeed FastFileWriter leak, issue #8003), quota (EDQUOT, or ENOSPC on Lustre) and
/dev/shm too small. ``[Errno 24] Too many open files`` (C2) is the per-process fd limit, usually
reached through a leak. ``differential()`` lists each candidate with a verdict (likely, unlikely,
unknown), what was measured and when, and evaluates the signature's checklist conditions against
the same readings. Readings are taken now, after the failure: every result says so.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

from denpex_tui.core import bounded
from denpex_tui.core.commands import DELETED_OPEN_TEMPLATE, deleted_open_command, render_command

from .conditions import METRICS, parse_condition
from .mounts import is_under
from .readings import PathReading, ProcessReading, Snapshot, iso_time, pct
from .sampler import SHM, read_path

NOTE = "measured now, not at failure time"

LIKELY, UNLIKELY, UNKNOWN = "likely", "unlikely", "unknown"

# thresholds (percent of the filesystem), one place
FULL_PCT = 1.0  # below this much free: exhausted
ROOMY_PCT = 5.0  # at least this much free: not exhausted now
GAP_LIKELY_PCT = 5.0  # df used above du by more than this: deleted-open files hold space
GAP_UNLIKELY_PCT = 1.0
FD_LIKELY_PCT = 90.0
FD_UNLIKELY_PCT = 50.0
ENFILE_LIKELY_PCT = 95.0


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
class Candidate:
    cause: str  # blocks, inodes, reserved, deleted-open, quota, lustre-ost, shm, fd-limit, fd-leak, system-fd-table
    title: str
    verdict: str  # likely | unlikely | unknown
    evidence: str
    measured: dict[str, Any] = field(default_factory=dict)
    check: str | None = None  # a command that confirms it (shown, never run)

    def to_json(self) -> dict:
        return {
            "cause": self.cause,
            "title": self.title,
            "verdict": self.verdict,
            "evidence": self.evidence,
            "measured": dict(self.measured),
            "check": self.check,
        }


@dataclass
class ChecklistResult:
    text: str
    condition: str | None
    result: bool | None  # None: not measurable here (or no condition)
    error: str | None = None

    def to_json(self) -> dict:
        return {"text": self.text, "condition": self.condition, "result": self.result,
                "error": self.error}


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
            "metrics": {k: _r(v) for k, v in self.metrics.items()},
            "summary": self.summary(),
            "node": self.node,
        }


# --- du of a filesystem (bounded) ----------------------------------------------------------


@dataclass
class DuResult:
    du_bytes: int | None
    entries: int
    reason: str | None  # why du_bytes is None (capped, unreadable, network...)
    at: float


_DU_CACHE: dict[tuple[str, int | None], DuResult] = {}
DU_TTL = 30.0


def clear_du_cache() -> None:
    _DU_CACHE.clear()


def du_filesystem(mount_point: str, *, max_entries: int = 100_000, max_seconds: float = 2.0,
                  use_cache: bool = True) -> DuResult:
    """Allocated bytes (st_blocks * 512) of everything reachable under ``mount_point`` on the
    same device, each inode once. Bounded: past ``max_entries`` entries or ``max_seconds`` the
    walk stops and ``du_bytes`` is None ("capped"), never a partial number."""
    now = time.time()
    try:
        root_dev = os.stat(mount_point).st_dev
    except OSError as e:
        return DuResult(None, 0, f"cannot stat {mount_point}: {e.strerror}", now)
    key = (mount_point, root_dev)
    if use_cache:
        c = _DU_CACHE.get(key)
        if c is not None and now - c.at < DU_TTL:
            return c
    t0 = time.monotonic()
    total = 0
    entries = 0
    seen: set[int] = set()
    stack = [mount_point]
    try:
        total += os.stat(mount_point).st_blocks * 512
    except OSError:
        pass
    reason = None
    while stack and reason is None:
        d = stack.pop()
        try:
            it = os.scandir(d)
        except PermissionError:
            reason = f"permission denied: {d}"
            break
        except FileNotFoundError:
            continue  # removed while walking
        except OSError as e:
            reason = f"cannot read {d}: {e.strerror}"
            break
        with it:
            for e in it:
                entries += 1
                if entries > max_entries:
                    reason = f"capped at {max_entries} entries"
                    break
                if (entries & 1023) == 0 and time.monotonic() - t0 > max_seconds:
                    reason = f"capped at {max_seconds:g} s"
                    break
                try:
                    st = e.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                except OSError:
                    continue
                if st.st_dev != root_dev:
                    continue  # another filesystem mounted below
                if st.st_nlink > 1 and not e.is_dir(follow_symlinks=False):
                    if st.st_ino in seen:
                        continue
                    seen.add(st.st_ino)
                total += st.st_blocks * 512
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
    res = DuResult(None if reason else total, entries, reason, now)
    _DU_CACHE[key] = res
    return res


def df_du_gap(reading: PathReading, source=None, **kw) -> tuple[float | None, DuResult | None, str | None]:
    """(gap in % of total, du result, reason when None). ``source``: the ProbeSource whose node
    the reading is of (its ``du``); default this machine."""
    if reading.error or reading.bytes_used is None or not reading.bytes_total:
        return None, None, reading.error or "no reading"
    if reading.network_fs:
        return None, None, "network filesystem: not walked"
    if reading.mount is None:
        return None, None, "mount unknown"
    if not os.path.isabs(reading.mount):  # a label, not a mount point ('demo disk (simulated by --demo)')
        return None, None, f"{reading.mount}: not a mounted filesystem, nothing for du to walk"
    if reading.mount_root not in (None, "/"):
        return None, None, "bind mount of a subtree: du cannot see the whole filesystem"
    du = source.du(reading.mount) if source is not None else du_filesystem(reading.mount, **kw)
    if du.du_bytes is None:
        return None, du, du.reason
    gap = max(0, reading.bytes_used - du.du_bytes)
    return 100.0 * gap / reading.bytes_total, du, None


# --- metrics ------------------------------------------------------------------------------


def _find_path(path: str | None, snapshot: Snapshot, source=None) -> PathReading | None:
    if path is None:  # only a path the user named; any other would be another filesystem's reading
        for p in snapshot.paths:
            if not p.is_shm and "--path" in p.why:
                return p
        return None
    if _is_shm_name(path):
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


def _is_shm_name(path: str) -> bool:
    """``</torch_...>`` (ATen shared-memory names) or anything under /dev/shm."""
    p = path.strip()
    if p.startswith("<") and p.endswith(">"):
        return True
    if p.startswith("/torch_") or p.startswith("/memfd:"):
        return True
    return p == SHM or p.startswith(SHM + "/")


def _workers(snapshot: Snapshot, pid: int | None) -> list[ProcessReading]:
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
    pr = _find_path(path, snapshot, source)
    if pr is not None and pr.error is None:
        m["path.bytes_free_pct"] = pr.bytes_free_pct
        m["path.inodes_free_pct"] = pr.inodes_free_pct
        m["path.bytes_reserved_pct"] = pr.bytes_reserved_pct
        if du:
            m["path.df_du_gap_pct"] = df_du_gap(pr, source)[0]
    shm = snapshot.shm
    if shm is not None and shm.error is None:
        m["shm.bytes_free_pct"] = shm.bytes_free_pct
    procs = _workers(snapshot, pid)
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


# --- checklist ----------------------------------------------------------------------------


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


# --- the differential ----------------------------------------------------------------------


def _gib(n: int | None) -> str:
    if n is None:
        return "?"
    v = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if v < 1024 or unit == "PiB":
            return f"{v:.0f} {unit}" if unit == "B" else f"{v:.1f} {unit}"
        v /= 1024
    return f"{v:.1f} PiB"  # pragma: no cover


def _p(v: float | None) -> str:
    return "?" if v is None else (f"{v:.2f} %" if v < 10 else f"{v:.1f} %")


def _measure_command(path: str | None) -> str | None:
    if not path:
        return None
    # a path a log names: its stat goes through the bounded worker (a dead mount never hangs us)
    d = path if bounded.isdir(path) else os.path.dirname(os.path.abspath(path))
    return _cmd("df -h -- {dir} && df -i -- {dir}", dir=d)


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
    pr = _find_path(path, snapshot, source)
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
    if kind == "emfile" and not _workers(snapshot, pid):
        d.caveats.append("no training process is running here: the process that hit the limit "
                         "has exited, and its fds with it")
    if kind == "emfile":
        d.candidates = _emfile_candidates(snapshot, trends, pid, metrics)
    else:
        d.candidates = _enospc_candidates(
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


def _enospc_candidates(sid: str, path: str | None, pr: PathReading | None, snap: Snapshot,
                       pid: int | None, m: dict, du: bool,
                       where: str | None = None, source=None) -> list[Candidate]:
    out: list[Candidate] = []
    shm_path = path is not None and _is_shm_name(path)
    target = path or (pr.path if pr else None)
    if where is None:
        where = pr.measured_path if pr and pr.measured_path else target
    if pr is None or pr.error is not None:
        why = (pr.error if pr is not None else "no path to measure") or "unreadable"
        checks = {"blocks": _cmd("df -h -- {dir}", dir=where), "inodes": _cmd("df -i -- {dir}", dir=where),
                  "reserved": _cmd("df -h -- {dir}", dir=where),
                  "deleted-open": deleted_open_command(where).text if where else _cmd(DELETED_OPEN_TEMPLATE)}
        for cause, title in (("blocks", "blocks exhausted"), ("inodes", "inodes exhausted"),
                             ("reserved", "ext4 reserved blocks"),
                             ("deleted-open", "deleted-but-open files")):
            out.append(Candidate(cause, title, UNKNOWN, f"the path could not be measured ({why})",
                                 {"error": why}, checks[cause]))
    else:
        bf = pr.bytes_free_pct
        meas = {"bytes_free": pr.bytes_free, "bytes_total": pr.bytes_total,
                "bytes_free_pct": _r(bf)}
        if bf is None:
            v, ev = UNKNOWN, "the filesystem reports no size"
        elif bf < FULL_PCT:
            v, ev = LIKELY, f"only {_gib(pr.bytes_free)} ({_p(bf)}) free for unprivileged writers"
        elif bf >= ROOMY_PCT:
            v, ev = UNLIKELY, f"{_gib(pr.bytes_free)} ({_p(bf)}) free now"
        else:
            v, ev = UNKNOWN, (f"{_gib(pr.bytes_free)} ({_p(bf)}) free: nearly full; one more "
                              "checkpoint may not fit")
        out.append(Candidate("blocks", "blocks exhausted", v, ev, meas, _cmd("df -h -- {dir}", dir=where)))

        ifp = pr.inodes_free_pct
        meas = {"inodes_free": pr.inodes_free, "inodes_total": pr.inodes_total,
                "inodes_free_pct": _r(ifp)}
        if pr.inodes_total is None:
            v, ev = UNKNOWN, f"{pr.fstype or 'this filesystem'} reports no inode count"
        elif ifp is not None and ifp < FULL_PCT:
            v, ev = LIKELY, (f"{pr.inodes_free} of {pr.inodes_total} inodes free ({_p(ifp)})"
                             + (f" while {_p(bf)} of the bytes are free" if bf and bf >= FULL_PCT
                                else ""))
        else:
            v, ev = UNLIKELY, f"{pr.inodes_free} inodes ({_p(ifp)}) free"
        out.append(Candidate("inodes", "inodes exhausted", v, ev, meas, _cmd("df -i -- {dir}", dir=where)))

        rp = pr.bytes_reserved_pct
        uids = sorted({p.uid for p in _workers(snap, pid) if p.uid is not None})
        meas = {"bytes_reserved": pr.bytes_reserved, "bytes_reserved_pct": _r(rp),
                "bytes_free_pct": _r(bf), "writer_uids": uids}
        if rp is None or bf is None:
            v, ev = UNKNOWN, "no size reported"
        elif bf < FULL_PCT and rp >= FULL_PCT:
            if uids and all(u == 0 for u in uids):
                v, ev = UNKNOWN, (f"{_gib(pr.bytes_reserved)} ({_p(rp)}) is reserved, but the "
                                  "trainer runs as root, which may use reserved blocks")
            else:
                v, ev = LIKELY, (f"unprivileged writers see {_p(bf)} free while "
                                 f"{_gib(pr.bytes_reserved)} ({_p(rp)}) is reserved for root")
        elif rp < FULL_PCT:
            v, ev = UNLIKELY, f"only {_p(rp)} reserved"
        else:
            v, ev = UNLIKELY, f"{_p(rp)} reserved, but {_p(bf)} is free for everyone"
        chk = _cmd('tune2fs -l "$(findmnt -no SOURCE -T {dir})" | grep -i reserved'
                   if (pr.fstype or "").startswith("ext") else "df -h -- {dir}", dir=where)
        out.append(Candidate("reserved", "root-reserved blocks", v, ev, meas, chk))

        out.append(_deleted_candidate(pr, snap, pid, m, du, where, source))

    # quota: statvfs cannot see it
    fstype = (pr.fstype if pr else None) or ""
    if fstype.startswith("lustre"):
        qchk = _cmd('lfs quota -h -u "$USER" {dir}', dir=pr.mount if pr else where)
    elif fstype.startswith("gpfs"):
        qchk = "mmlsquota"
    elif fstype.startswith("beegfs"):
        qchk = "beegfs-ctl --getquota --uid $USER"
    else:
        qchk = "quota -s"
    qev = ("statvfs cannot see quotas: check them; quota usually gives errno 122 "
           "'Disk quota exceeded'")
    if fstype.startswith("lustre"):
        qev += ", but Lustre can report an exceeded quota as ENOSPC"
    qv = UNKNOWN
    if "edquot" in sid or "quota" in sid:
        qv = LIKELY
        qev = ("the error is EDQUOT (errno 122, 'Disk quota exceeded'): a quota, whatever df "
               "shows; statvfs cannot see quotas")
    out.append(Candidate("quota", "quota exceeded", qv, qev, {"fstype": fstype or None}, qchk))
    if fstype.startswith("lustre"):
        out.append(Candidate(
            "lustre-ost", "one Lustre OST full", UNKNOWN,
            "a single full OST gives ENOSPC for files striped on it while the filesystem total "
            "shows free space; statvfs only sees the total",
            {"fstype": fstype}, _cmd("lfs df -h {dir}", dir=pr.mount if pr else where)))

    # /dev/shm
    shm = snap.shm
    meas = {"shm_bytes_free": shm.bytes_free if shm else None,
            "shm_bytes_total": shm.bytes_total if shm else None,
            "shm_bytes_free_pct": _r(shm.bytes_free_pct) if shm else None,
            "shm_open_bytes": sum(p.shm_open_bytes or 0 for p in _workers(snap, pid)) or None}
    sf = shm.bytes_free_pct if shm is not None and shm.error is None else None
    if shm_path:
        v = LIKELY
        ev = (f"the failing name {path!r} is shared memory (/dev/shm), not the checkpoint disk"
              + (f"; /dev/shm is {_gib(shm.bytes_total)} with {_p(sf)} free now (segments are "
                 "freed when the workers die)" if shm is not None and sf is not None else ""))
    elif "shm" in sid:
        v = LIKELY if sf is not None and sf < ROOMY_PCT else UNKNOWN
        ev = (f"/dev/shm has {_p(sf)} free now" if sf is not None else "/dev/shm not measured")
    elif sf is not None and sf < FULL_PCT:
        v, ev = UNKNOWN, (f"/dev/shm is full ({_p(sf)} free), but the failing path is not on it")
    else:
        v = UNLIKELY
        ev = ("the failing path is not on /dev/shm" if path else "/dev/shm has room") + (
            f"; /dev/shm has {_p(sf)} free" if sf is not None else "")
    out.append(Candidate("shm", "/dev/shm too small", v, ev, meas, "df -h /dev/shm"))
    return out


def _deleted_candidate(pr: PathReading, snap: Snapshot, pid: int | None, m: dict, du: bool,
                       where: str, source=None) -> Candidate:
    gap = m.get("path.df_du_gap_pct")
    gap_reason = None
    du_bytes = None
    if du:
        _g, dres, gap_reason = df_du_gap(pr, source)
        if dres is not None:
            du_bytes = dres.du_bytes
    held = pr.deleted_open_bytes
    holders = []
    for p in _workers(snap, pid):
        n = 0
        for f in p.deleted or ():
            if pr.mount and is_under(f.path, pr.mount):
                n += f.bytes
        if n:
            holders.append({"pid": p.pid, "rank": p.rank, "deleted_open_bytes": n,
                            "deleted_open_files": p.deleted_open_files})
    meas = {"df_used": pr.bytes_used, "du": du_bytes, "df_du_gap_pct": _r(gap),
            "deleted_open_bytes_watched": held, "holders": holders}
    if gap is None and gap_reason:
        meas["du_unavailable"] = gap_reason
    thr = (pr.bytes_total or 0) * GAP_LIKELY_PCT / 100
    if gap is not None and gap > GAP_LIKELY_PCT:
        v = LIKELY
        ev = (f"df used {_gib(pr.bytes_used)} is {_p(gap)} of the filesystem above du "
              f"{_gib(du_bytes)}")
        if holders:
            ev += "; held by " + ", ".join(
                f"pid {h['pid']}" + (f" (rank {h['rank']})" if h["rank"] is not None else "")
                + f": {_gib(h['deleted_open_bytes'])}" for h in holders[:4])
        else:
            ev += "; no watched process holds them: look for other holders"
    elif held is not None and held > 0 and held >= thr:
        v = LIKELY
        ev = f"watched processes hold {_gib(held)} in deleted-but-open files on this filesystem"
    elif gap is not None and gap < GAP_UNLIKELY_PCT and not held:
        v, ev = UNLIKELY, f"df used and du agree (gap {_p(gap)})"
    elif held:
        v = UNKNOWN
        ev = f"watched processes hold {_gib(held)} in deleted-but-open files" + (
            f"; gap {_p(gap)}" if gap is not None else f"; du not measured ({gap_reason})")
    else:
        v = UNKNOWN
        ev = "no deleted-but-open files in the watched processes" + (
            f", but df-du gap is {_p(gap)}" if gap is not None else
            f"; du not measured ({gap_reason})" if gap_reason else "")
    at = pr.mount if pr.mount and where == pr.measured_path else where
    return Candidate("deleted-open", "deleted-but-open files hold the space", v, ev, meas,
                     deleted_open_command(at).text + " ; " + _cmd("du -sxh -- {dir}", dir=at))


def _emfile_candidates(snap: Snapshot, trends, pid: int | None, m: dict) -> list[Candidate]:
    out: list[Candidate] = []
    procs = _workers(snap, pid)
    readable = [p for p in procs if p.fds is not None and p.fd_soft_limit]
    per = [{"pid": p.pid, "rank": p.rank, "fds": p.fds, "fd_soft_limit": p.fd_soft_limit,
            "fd_hard_limit": p.fd_hard_limit, "fd_used_pct": _r(p.fd_used_pct)} for p in procs]
    if not procs:
        v, ev = UNKNOWN, ("no training process to measure here (it may have exited: its fds at "
                          "failure time are gone with it)")
    elif not readable:
        v, ev = UNKNOWN, "the training processes could not be read (" + ", ".join(
            sorted({p.error or "?" for p in procs})) + ")"
    else:
        worst = max(readable, key=lambda p: p.fd_used_pct or 0)
        u = worst.fd_used_pct or 0
        lab = f"pid {worst.pid}" + (f" (rank {worst.rank})" if worst.rank is not None else "")
        if u >= FD_LIKELY_PCT:
            v = LIKELY
        elif u < FD_UNLIKELY_PCT:
            v = UNLIKELY
        else:
            v = UNKNOWN
        ev = f"{lab} has {worst.fds} fds open of a soft limit of {worst.fd_soft_limit} ({_p(u)})"
        if worst.fd_hard_limit and worst.fd_soft_limit and worst.fd_hard_limit > worst.fd_soft_limit:
            ev += (f"; the soft limit can be raised to the hard limit {worst.fd_hard_limit} "
                   "without privileges (ulimit -n)")
    wp = (max(readable, key=lambda p: p.fd_used_pct or 0).pid if readable
          else procs[0].pid if procs else None)
    chk = _cmd("ls /proc/{pid}/fd | wc -l ; grep 'Max open files' /proc/{pid}/limits", pid=wp)
    out.append(Candidate("fd-limit", "per-process fd limit (RLIMIT_NOFILE) reached", v, ev,
                         {"processes": per}, chk))

    g = m.get("proc.fd_growth_per_save")
    lk = None
    if trends is not None:
        for p in procs:
            tr = trends.process_trend(p.pid, p.create_time)
            if tr is not None and tr.fd_save_fit is not None and tr.fd_save_fit.steady:
                if lk is None or (tr.fd_growth_per_save or 0) > (lk.fd_growth_per_save or 0):
                    lk = tr
    if lk is not None and (lk.fd_growth_per_save or 0) > 0:
        v = LIKELY
        ev = (f"{lk.label()} keeps {lk.fd_growth_per_save:.3g} more fds open after every "
              f"checkpoint save ({lk.saves_observed} saves observed)")
        if lk.eta_text():
            ev += "; " + lk.eta_text()
    elif lk is not None:
        v, ev = UNLIKELY, f"fd count steady across {lk.saves_observed} checkpoint saves"
    elif g is not None:
        v, ev = UNKNOWN, f"fd growth per save {g:.3g}, not steady yet"
    else:
        v, ev = UNKNOWN, ("needs fd counts around at least 3 checkpoint saves "
                          "(run denpex probe --stream with --logs while training)")
    out.append(Candidate("fd-leak", "fd leak (fds opened and not closed per save)", v, ev,
                         {"fd_growth_per_save": _r(g)},
                         _cmd("ls -l /proc/{pid}/fd | awk '{{print $NF}}' | sort | uniq -c | sort -rn | head", pid=wp)))

    fo, fmx = snap.system_files_open, snap.system_files_max
    sp = pct(fo, fmx)
    if sp is None:
        v, ev = UNKNOWN, "/proc/sys/fs/file-nr unreadable"
    elif sp >= ENFILE_LIKELY_PCT:
        v, ev = LIKELY, f"the system file table is full ({fo} of {fmx}): that is ENFILE (errno 23)"
    else:
        v, ev = UNLIKELY, f"system file table {fo} of {fmx} ({_p(sp)})"
    out.append(Candidate("system-fd-table", "system-wide file table (ENFILE)", v, ev,
                         {"files_open": fo, "files_max": fmx}, "cat /proc/sys/fs/file-nr"))
    return out


def _cmd(template: str, **values: object) -> str:
    """A check command built by core/commands.py: each value quoted as one shell word, a value
    that is missing or unsafe left as ``<name>``."""
    return render_command("check", template, values).text


def _r(v: float | None, nd: int = 3) -> float | None:
    return None if v is None else round(float(v), nd)


__all__ = [
    "NOTE",
    "Candidate",
    "ChecklistResult",
    "Differential",
    "DuResult",
    "differential",
    "differential_kind",
    "metrics_for",
    "du_filesystem",
    "df_du_gap",
    "load_checklist",
    "evaluate_checklist",
]
