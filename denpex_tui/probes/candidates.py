"""The candidate causes of an ENOSPC- or EMFILE-family error, each judged from the readings.

ENOSPC: blocks, inodes, ext4 root-reserved blocks, deleted-but-open files, quota (and one
full Lustre OST), /dev/shm.  EMFILE: the per-process fd limit, an fd leak per checkpoint
save, the system-wide file table (ENFILE).  Each ``Candidate`` has a verdict (likely,
unlikely, unknown), the evidence in words, what was measured, and a command that confirms it
(built by core/commands.py: shown, never run).  The thresholds are here, in one place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from denpex_tui.core.commands import DELETED_OPEN_TEMPLATE, deleted_open_command, render_command

from .du import df_du_gap
from .metrics import is_shm_name, workers
from .mounts import is_under
from .readings import PathReading, Snapshot, pct

__all__ = ["LIKELY", "UNLIKELY", "UNKNOWN", "Candidate", "enospc_candidates", "emfile_candidates",
           "check_command", "rounded"]

LIKELY, UNLIKELY, UNKNOWN = "likely", "unlikely", "unknown"

# thresholds (percent of the filesystem), one place
FULL_PCT = 1.0  # below this much free: exhausted
ROOMY_PCT = 5.0  # at least this much free: not exhausted now
GAP_LIKELY_PCT = 5.0  # df used above du by more than this: deleted-open files hold space
GAP_UNLIKELY_PCT = 1.0
FD_LIKELY_PCT = 90.0
FD_UNLIKELY_PCT = 50.0
ENFILE_LIKELY_PCT = 95.0


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



def enospc_candidates(sid: str, path: str | None, pr: PathReading | None, snap: Snapshot,
                      pid: int | None, m: dict, du: bool,
                      where: str | None = None, source=None) -> list[Candidate]:
    target = path or (pr.path if pr else None)
    if where is None:
        where = pr.measured_path if pr and pr.measured_path else target
    if pr is None or pr.error is not None:
        out = _unmeasured(pr, where)
    else:
        bf = pr.bytes_free_pct
        out = [_blocks(pr, bf, where), _inodes(pr, bf, where), _reserved(pr, bf, snap, pid, where),
               _deleted_candidate(pr, snap, pid, m, du, where, source)]
    out.extend(_quota(sid, pr, where))
    out.append(_shm(sid, path, snap, pid))
    return out


def _unmeasured(pr: PathReading | None, where: str | None) -> list[Candidate]:
    why = (pr.error if pr is not None else "no path to measure") or "unreadable"
    checks = {"blocks": check_command("df -h -- {dir}", dir=where), "inodes": check_command("df -i -- {dir}", dir=where),
              "reserved": check_command("df -h -- {dir}", dir=where),
              "deleted-open": deleted_open_command(where).text if where else check_command(DELETED_OPEN_TEMPLATE)}
    return [Candidate(cause, title, UNKNOWN, f"the path could not be measured ({why})", {"error": why}, checks[cause])
            for cause, title in (("blocks", "blocks exhausted"), ("inodes", "inodes exhausted"),
                                 ("reserved", "ext4 reserved blocks"),
                                 ("deleted-open", "deleted-but-open files"))]


def _blocks(pr: PathReading, bf: float | None, where: str | None) -> Candidate:
    meas = {"bytes_free": pr.bytes_free, "bytes_total": pr.bytes_total,
            "bytes_free_pct": rounded(bf)}
    if bf is None:
        v, ev = UNKNOWN, "the filesystem reports no size"
    elif bf < FULL_PCT:
        v, ev = LIKELY, f"only {_gib(pr.bytes_free)} ({_p(bf)}) free for unprivileged writers"
    elif bf >= ROOMY_PCT:
        v, ev = UNLIKELY, f"{_gib(pr.bytes_free)} ({_p(bf)}) free now"
    else:
        v, ev = UNKNOWN, (f"{_gib(pr.bytes_free)} ({_p(bf)}) free: nearly full; one more "
                          "checkpoint may not fit")
    return Candidate("blocks", "blocks exhausted", v, ev, meas, check_command("df -h -- {dir}", dir=where))


def _inodes(pr: PathReading, bf: float | None, where: str | None) -> Candidate:
    ifp = pr.inodes_free_pct
    meas = {"inodes_free": pr.inodes_free, "inodes_total": pr.inodes_total,
            "inodes_free_pct": rounded(ifp)}
    if pr.inodes_total is None:
        v, ev = UNKNOWN, f"{pr.fstype or 'this filesystem'} reports no inode count"
    elif ifp is not None and ifp < FULL_PCT:
        v, ev = LIKELY, (f"{pr.inodes_free} of {pr.inodes_total} inodes free ({_p(ifp)})"
                         + (f" while {_p(bf)} of the bytes are free" if bf and bf >= FULL_PCT
                            else ""))
    else:
        v, ev = UNLIKELY, f"{pr.inodes_free} inodes ({_p(ifp)}) free"
    return Candidate("inodes", "inodes exhausted", v, ev, meas, check_command("df -i -- {dir}", dir=where))


def _reserved(pr: PathReading, bf: float | None, snap: Snapshot, pid: int | None, where: str | None) -> Candidate:
    rp = pr.bytes_reserved_pct
    uids = sorted({p.uid for p in workers(snap, pid) if p.uid is not None})
    meas = {"bytes_reserved": pr.bytes_reserved, "bytes_reserved_pct": rounded(rp),
            "bytes_free_pct": rounded(bf), "writer_uids": uids}
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
    chk = check_command('tune2fs -l "$(findmnt -no SOURCE -T {dir})" | grep -i reserved'
                        if (pr.fstype or "").startswith("ext") else "df -h -- {dir}", dir=where)
    return Candidate("reserved", "root-reserved blocks", v, ev, meas, chk)


def _quota(sid: str, pr: PathReading | None, where: str | None) -> list[Candidate]:
    """Quota (statvfs cannot see it), and on Lustre one full OST."""
    out = []
    fstype = (pr.fstype if pr else None) or ""
    if fstype.startswith("lustre"):
        qchk = check_command('lfs quota -h -u "$USER" {dir}', dir=pr.mount if pr else where)
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
            {"fstype": fstype}, check_command("lfs df -h {dir}", dir=pr.mount if pr else where)))
    return out


def _shm(sid: str, path: str | None, snap: Snapshot, pid: int | None) -> Candidate:
    shm_path = path is not None and is_shm_name(path)
    shm = snap.shm
    meas = {"shm_bytes_free": shm.bytes_free if shm else None,
            "shm_bytes_total": shm.bytes_total if shm else None,
            "shm_bytes_free_pct": rounded(shm.bytes_free_pct) if shm else None,
            "shm_open_bytes": sum(p.shm_open_bytes or 0 for p in workers(snap, pid)) or None}
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
    return Candidate("shm", "/dev/shm too small", v, ev, meas, "df -h /dev/shm")


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
    for p in workers(snap, pid):
        n = 0
        for f in p.deleted or ():
            if pr.mount and is_under(f.path, pr.mount):
                n += f.bytes
        if n:
            holders.append({"pid": p.pid, "rank": p.rank, "deleted_open_bytes": n,
                            "deleted_open_files": p.deleted_open_files})
    meas = {"df_used": pr.bytes_used, "du": du_bytes, "df_du_gap_pct": rounded(gap),
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
                     deleted_open_command(at).text + " ; " + check_command("du -sxh -- {dir}", dir=at))


def emfile_candidates(snap: Snapshot, trends, pid: int | None, m: dict) -> list[Candidate]:
    out: list[Candidate] = []
    procs = workers(snap, pid)
    readable = [p for p in procs if p.fds is not None and p.fd_soft_limit]
    per = [{"pid": p.pid, "rank": p.rank, "fds": p.fds, "fd_soft_limit": p.fd_soft_limit,
            "fd_hard_limit": p.fd_hard_limit, "fd_used_pct": rounded(p.fd_used_pct)} for p in procs]
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
    chk = check_command("ls /proc/{pid}/fd | wc -l ; grep 'Max open files' /proc/{pid}/limits", pid=wp)
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
                         {"fd_growth_per_save": rounded(g)},
                         check_command("ls -l /proc/{pid}/fd | awk '{{print $NF}}' | sort | uniq -c | sort -rn | head", pid=wp)))

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



def check_command(template: str, **values: object) -> str:
    """A check command built by core/commands.py: each value quoted as one shell word, a value
    that is missing or unsafe left as ``<name>``."""
    return render_command("check", template, values).text


def rounded(v: float | None, nd: int = 3) -> float | None:
    return None if v is None else round(float(v), nd)
