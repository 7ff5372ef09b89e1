"""Reading ``denpex probe --json`` / ``--stream`` output back into readings (schema 1).

A remote node's probe is another Denpex, possibly of another version, behind a transport that
may add its own text (an ssh banner, srun's ``0: `` labels, a shell's error). Everything read
here is untrusted: a line that is not one JSON object is *garbage*, an object whose ``schema``
is not ours is *another schema* (a Denpex of another version, reported as such), and a schema-1
object with a field of the wrong type is *invalid*. Each raises :class:`WireError` with its
kind; nothing here raises anything else, and nothing is evaluated.

Unknown fields are ignored (schema 1 only ever gains fields); a missing reading is ``None``.
"""

from __future__ import annotations

import datetime as _dt
import json
from typing import Any

from denpex_tui.core.text import safe_str

from .readings import SCHEMA, DeletedFile, PathReading, ProcessReading, Snapshot

MAX_LINE = 8 << 20  # a snapshot of 1000 processes is ~1 MiB
MAX_ITEMS = 10_000

GARBAGE, OTHER_SCHEMA, INVALID = "garbage", "other-schema", "invalid"


class WireError(ValueError):
    def __init__(self, kind: str, message: str, remote_schema: object = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.remote_schema = remote_schema


def _int(d: dict, k: str) -> int | None:
    v = d.get(k)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise WireError(INVALID, f"{k}: expected an integer, got {type(v).__name__}")
    return v


def _num(d: dict, k: str) -> float | None:
    v = d.get(k)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v in (float("inf"), float("-inf")):
        raise WireError(INVALID, f"{k}: expected a number")
    return float(v)


def _str(d: dict, k: str, limit: int = 4096) -> str | None:
    v = d.get(k)
    if v is None:
        return None
    if not isinstance(v, str):
        raise WireError(INVALID, f"{k}: expected a string, got {type(v).__name__}")
    return v[:limit]


def _word(d: dict, k: str, limit: int = 200) -> str | None:
    """A descriptive field (status, error, role, fstype): shown as is by the views, so made safe
    here (control characters escaped by core.text), unlike paths and argv, kept exact."""
    v = _str(d, k, limit)
    return None if v is None else safe_str(v)[:limit]


def _bool(d: dict, k: str) -> bool | None:
    v = d.get(k)
    if v is None:
        return None
    if not isinstance(v, bool):
        raise WireError(INVALID, f"{k}: expected true or false")
    return v


def _list(d: dict, k: str) -> list:
    v = d.get(k)
    if v is None:
        return []
    if not isinstance(v, list):
        raise WireError(INVALID, f"{k}: expected a list")
    if len(v) > MAX_ITEMS:
        raise WireError(INVALID, f"{k}: more than {MAX_ITEMS} entries")
    return v


def _obj(v: Any, what: str) -> dict:
    if not isinstance(v, dict):
        raise WireError(INVALID, f"{what}: expected an object")
    return v


def _int_map(d: dict, k: str) -> dict[str, int] | None:
    v = d.get(k)
    if v is None:
        return None
    if not isinstance(v, dict):
        raise WireError(INVALID, f"{k}: expected an object")
    out = {}
    for kk, vv in list(v.items())[:MAX_ITEMS]:
        if isinstance(vv, bool) or not isinstance(vv, int):
            raise WireError(INVALID, f"{k}.{kk[:40]}: expected an integer")
        out[str(kk)[:4096]] = vv
    return out


def process_from_json(d: dict) -> ProcessReading:
    d = _obj(d, "process")
    pid = _int(d, "pid")
    if pid is None:
        raise WireError(INVALID, "process without a pid")
    cmd = _list(d, "cmdline")
    if not all(isinstance(a, str) for a in cmd):
        raise WireError(INVALID, "cmdline: expected a list of strings")
    deleted = None
    if d.get("deleted") is not None:
        deleted = []
        for f in _list(d, "deleted"):
            f = _obj(f, "deleted")
            deleted.append(DeletedFile(fd=_int(f, "fd") or 0, path=_str(f, "path") or "",
                                       bytes=_int(f, "bytes") or 0, size=_int(f, "size") or 0))
    return ProcessReading(
        pid=pid, rank=_int(d, "rank"), local_rank=_int(d, "local_rank"),
        world_size=_int(d, "world_size"), cmdline=[a[:4096] for a in cmd[:1000]],
        role=_word(d, "role", 40) or "worker", create_time=_num(d, "create_time"),
        readable=bool(_bool(d, "readable")), error=_word(d, "error"), status=_word(d, "status", 40),
        uid=_int(d, "uid"), fds=_int(d, "fds"), fd_soft_limit=_int(d, "fd_soft_limit"),
        fd_hard_limit=_int(d, "fd_hard_limit"), fds_by_kind=_int_map(d, "fds_by_kind"),
        deleted_open_files=_int(d, "deleted_open_files"),
        deleted_open_bytes=_int(d, "deleted_open_bytes"), deleted=deleted,
        shm_open_files=_int(d, "shm_open_files"), shm_open_bytes=_int(d, "shm_open_bytes"),
        open_under_watched=_int_map(d, "open_under_watched"), rss_bytes=_int(d, "rss_bytes"),
        node=_str(d, "node", 253), cwd=_str(d, "cwd"),
    )


def path_from_json(d: dict) -> PathReading:
    d = _obj(d, "path")
    path = _str(d, "path")
    if not path:
        raise WireError(INVALID, "path entry without a path")
    why = _list(d, "why")
    if not all(isinstance(w, str) for w in why):
        raise WireError(INVALID, "why: expected a list of strings")
    return PathReading(
        path=path, why=[w[:400] for w in why[:16]], exists=_bool(d, "exists"),
        measured_path=_str(d, "measured_path"), mount=_str(d, "mount"), fstype=_word(d, "fstype"),
        source=_str(d, "source"), fs_class=_word(d, "fs_class", 40), network_fs=_bool(d, "network_fs"),
        readonly=_bool(d, "readonly"), bytes_total=_int(d, "bytes_total"),
        bytes_free=_int(d, "bytes_free"), bytes_reserved=_int(d, "bytes_reserved"),
        bytes_used=_int(d, "bytes_used"), inodes_total=_int(d, "inodes_total"),
        inodes_free=_int(d, "inodes_free"), error=_word(d, "error"), is_shm=bool(_bool(d, "shm")),
        open_fds=_int(d, "open_fds"), deleted_open_bytes=_int(d, "deleted_open_bytes"),
        node=_str(d, "node", 253),
    )


def _time(d: dict) -> float:
    t = _num(d, "time_unix_full")  # an evidence bundle's probe.json keeps the exact time
    if t is None:
        t = _num(d, "unix_time")
    if t is not None:
        return t
    s = _str(d, "time", 64)
    if not s:
        raise WireError(INVALID, "snapshot without a time")
    try:
        return _dt.datetime.fromisoformat(s).timestamp()
    except ValueError:
        raise WireError(INVALID, f"time: not an ISO 8601 time: {s[:40]!r}")


def snapshot_from_json(d: Any) -> Snapshot:
    """A :class:`Snapshot` from a decoded schema-1 object; raises :class:`WireError`."""
    if not isinstance(d, dict):
        raise WireError(GARBAGE, f"not a JSON object but a {type(d).__name__}")
    if "schema" not in d:
        raise WireError(GARBAGE, "a JSON object without a schema: not a probe snapshot")
    sch = d.get("schema")
    if sch != SCHEMA or isinstance(sch, bool):
        raise WireError(OTHER_SCHEMA, f"schema {str(sch)[:20]} (this Denpex reads schema {SCHEMA})", sch)
    system = d.get("system") if isinstance(d.get("system"), dict) else {}
    cost = _num(d, "cost_ms")
    procs = [process_from_json(p) for p in _list(d, "processes")]
    return Snapshot(
        time=_time(d), host=_word(d, "host", 253) or "?",
        processes=procs,
        paths=[path_from_json(p) for p in _list(d, "paths")],
        discovered=d["discovered"] if isinstance(d.get("discovered"), bool) else (bool(procs) or "note" in d),
        system_files_open=_int(system, "files_open"), system_files_max=_int(system, "files_max"),
        cost_s=None if cost is None else cost / 1000.0,
    )


def parse_line(line: bytes | str) -> Snapshot:
    """One line of ``denpex probe --stream --json``; raises :class:`WireError`."""
    if len(line) > MAX_LINE:
        raise WireError(GARBAGE, f"a line of {len(line)} bytes (more than {MAX_LINE})")
    if isinstance(line, bytes):
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError:
            raise WireError(GARBAGE, "not UTF-8")
    s = line.strip()
    if not s.startswith("{"):
        raise WireError(GARBAGE, "not a JSON object")
    try:
        d = json.loads(s)
    except (ValueError, RecursionError) as e:
        raise WireError(GARBAGE, f"not JSON ({str(e)[:80]})")
    return snapshot_from_json(d)


__all__ = ["WireError", "parse_line", "snapshot_from_json", "process_from_json",
           "path_from_json", "GARBAGE", "OTHER_SCHEMA", "INVALID", "MAX_LINE"]
