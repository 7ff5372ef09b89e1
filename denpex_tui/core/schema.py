"""One JSON schema for everything Denpex writes and reads back (``"schema": 1``).

``to_json``/``from_json`` for findings, incidents, markers, job sources, probe snapshots and
differentials. The public faces (``scan --json``, ``probe --json``) are the ``to_json`` of
:mod:`denpex_tui.core.model` and :mod:`denpex_tui.probes`; the forms here are supersets of them
(fields are only ever added), carrying what is needed to rebuild the object: an evidence bundle
written by one Denpex is read back by another with the same diagnosis.

Rules:

* ``from_json(to_json(x))`` rebuilds ``x`` (times at full precision via ``time_full``);
  ``to_json(from_json(j)) == j`` for any ``j`` this module wrote.
* ``Finding.extra`` (detector fields such as ``path``/``errno``, or a ``fields`` dict) is
  serialised generically: JSON scalars, lists and dicts as they are, tuples as lists, anything
  else as its ``str``.
* A document with another ``schema`` number is refused (:class:`SchemaError`), never guessed.

Probe classes are imported lazily (``probes`` sits above ``core`` in the layers).
"""

from __future__ import annotations

from dataclasses import fields as dc_fields
from datetime import datetime
from typing import Any

from .model import Finding, Incident, Marker, iso
from .text import safe_str

__all__ = [
    "SCHEMA",
    "SchemaError",
    "check_schema",
    "json_value",
    "finding_to_json",
    "finding_from_json",
    "incident_to_json",
    "incident_from_json",
    "marker_to_json",
    "marker_from_json",
    "snapshot_to_json",
    "snapshot_from_json",
    "differential_to_json",
    "differential_from_json",
]

SCHEMA = 1


class SchemaError(ValueError):
    pass


def check_schema(doc: Any, what: str = "document") -> dict:
    if not isinstance(doc, dict):
        raise SchemaError(f"{what}: not a JSON object")
    if doc.get("schema") != SCHEMA:
        raise SchemaError(f"{what}: schema {doc.get('schema')!r} is not {SCHEMA}")
    return doc


def json_value(v: Any) -> Any:
    """A JSON-safe copy of ``v`` (generic, for ``Finding.extra`` and similar bags)."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, datetime):
        return v.isoformat()
    if isinstance(v, dict):
        return {str(k): json_value(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, set, frozenset)):
        seq = sorted(v, key=repr) if isinstance(v, (set, frozenset)) else v
        return [json_value(x) for x in seq]
    return str(v)


def opt_int(j: dict, key: str, what: str = "") -> int | None:
    """``j[key]`` as an int, or None when absent/null; anything else (a string, a bool, an
    object) is a :class:`SchemaError`: a bundle is untrusted input."""
    v = j.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise SchemaError(f"{what or 'document'}: {key!r} must be an integer, not {type(v).__name__}")
    return v


def opt_str(j: dict, key: str, what: str = "") -> str | None:
    v = j.get(key)
    if v is None:
        return None
    if not isinstance(v, str):
        raise SchemaError(f"{what or 'document'}: {key!r} must be a string, not {type(v).__name__}")
    return v


def opt_list(j: dict, key: str, what: str = "", item=None) -> list:
    v = j.get(key)
    if v is None:
        return []
    if not isinstance(v, list) or (item is not None and not all(isinstance(x, item) for x in v)):
        raise SchemaError(f"{what or 'document'}: {key!r} must be a list"
                          + (f" of {item.__name__ if isinstance(item, type) else 'values'}" if item else ""))
    return v


def opt_dict(j: dict, key: str, what: str = "") -> dict:
    v = j.get(key)
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise SchemaError(f"{what or 'document'}: {key!r} must be an object, not {type(v).__name__}")
    return v


def _time(j: dict, key: str = "time") -> datetime | None:
    s = j.get(key + "_full") or j.get(key)
    if not s:
        return None
    if not isinstance(s, str):
        raise SchemaError(f"{key}: {type(s).__name__} is not an ISO time")
    try:
        return datetime.fromisoformat(s)
    except (TypeError, ValueError):
        raise SchemaError(f"{key}: {s!r} is not an ISO time") from None


# -- findings -----------------------------------------------------------------------------


def finding_to_json(f: Finding) -> dict[str, Any]:
    """``Finding.to_json()`` plus what rebuilding it needs."""
    d = f.to_json()
    d.update({
        "family": f.family,
        "offset": f.offset,
        "raw_text": f.raw_text,
        "node_key": safe_str(f.node_key) if f.node_key is not None else None,
        "host": f.host,
        "time_full": f.time.isoformat() if f.time is not None else None,
        "time_text": f.time_text,
        "priority": f.priority,
        "source_order": f.source_order,
        "traceback_start": f.traceback_start,
        "chained": list(f.chained),
        "extra": json_value(f.extra),
        "fields": json_value(f.fields),
        "builtin": f.builtin,
        "spans": [list(s) for s in f.spans],
    })
    return d


def finding_from_json(j: dict[str, Any]) -> Finding:
    if not isinstance(j, dict):
        raise SchemaError("finding: not a JSON object")
    w = "finding"
    try:
        spans = tuple(tuple(x) for x in opt_list(j, "spans", w, list))
        if not all(len(x) == 2 and all(isinstance(n, int) and not isinstance(n, bool) for n in x) for x in spans):
            raise SchemaError("finding: 'spans' must be pairs of integers")
        return Finding(
            signature=str(j["signature"]),
            title=str(j.get("title") or ""),
            role=str(j.get("role") or ""),
            severity=str(j.get("severity") or "error"),
            phase=str(j.get("phase") or "any"),
            family=str(j.get("family") or str(j["signature"]).split(".", 1)[0]),
            path=str(j.get("path") or ""),
            line=opt_int(j, "line", w) or 0,
            text_line=opt_int(j, "text_line", w) or opt_int(j, "line", w) or 0,
            offset=opt_int(j, "offset", w) or 0,
            text=str(j.get("text") or ""),
            raw_text=str(j.get("raw_text") or ""),
            rank=opt_int(j, "rank", w),
            local_rank=opt_int(j, "local_rank", w),
            node_key=opt_str(j, "node_key", w),
            node=opt_str(j, "node", w),
            host=opt_str(j, "host", w),
            attempt=opt_int(j, "attempt", w) or 0,
            time=_time(j),
            time_text=opt_str(j, "time_text", w),
            time_approx=bool(j.get("time_approx")),
            count=opt_int(j, "count", w) or 1,
            priority=3 if j.get("priority") is None else opt_int(j, "priority", w),
            source_order=opt_int(j, "source_order", w) or 0,
            exc_type=opt_str(j, "exception", w),
            origin_frame=opt_str(j, "origin_frame", w),
            traceback_start=opt_int(j, "traceback_start", w),
            chained=[str(x) for x in opt_list(j, "chained", w)],
            extra=dict(opt_dict(j, "extra", w)),
            fields=dict(opt_dict(j, "fields", w)),
            builtin=bool(j.get("builtin", True)),
            spans=spans,
        )
    except KeyError as exc:
        raise SchemaError(f"finding: missing {exc.args[0]!r}") from None
    except (TypeError, ValueError) as exc:
        if isinstance(exc, SchemaError):
            raise
        raise SchemaError(f"finding: {exc}") from None


# -- incidents ----------------------------------------------------------------------------


def incident_to_json(inc: Incident) -> dict[str, Any]:
    """``Incident.to_json()`` with each finding in its full form, plus ``unmapped``."""
    d = inc.to_json()
    d["initiating"] = finding_to_json(inc.initiating) if inc.initiating else None
    d["collateral"] = [finding_to_json(f) for f in inc.collateral]
    d["same_cause"] = [finding_to_json(f) for f in inc.same_cause]
    d["first_warning"] = json_value(inc.first_warning)
    d["unmapped"] = list(inc.unmapped)
    d["hypotheses"] = json_value(inc.hypotheses)
    return d


def incident_from_json(j: dict[str, Any]) -> Incident:
    if not isinstance(j, dict):
        raise SchemaError("incident: not a JSON object")
    w = "incident"
    ini = j.get("initiating")
    fw = j.get("first_warning")
    if fw is not None and not isinstance(fw, dict):
        raise SchemaError("incident: 'first_warning' must be an object")
    return Incident(
        attempt=opt_int(j, "attempt", w) or 0,
        initiating=finding_from_json(ini) if ini else None,
        collateral=[finding_from_json(x) for x in opt_list(j, "collateral", w)],
        same_cause=[finding_from_json(x) for x in opt_list(j, "same_cause", w)],
        first_warning=fw,
        confidence=str(j.get("confidence") or ""),
        evidence=[str(e) for e in opt_list(j, "evidence", w)],
        summary=str(j.get("summary") or ""),
        unmapped=[str(u) for u in opt_list(j, "unmapped", w)],
        logs_alone=str(j["logs_alone"]) if j.get("logs_alone") else None,
        collectives=j.get("collectives") if isinstance(j.get("collectives"), dict) else None,
        hypotheses=[dict(h) for h in opt_list(j, "hypotheses", w) if isinstance(h, dict)],
    )


# -- markers (context lines: versions, saves, paths) -----------------------------------------


def marker_to_json(m: Marker) -> dict[str, Any]:
    return {
        "signature": m.signature,
        "path": safe_str(m.path),
        "line": m.line,
        "text": m.text,
        "rank": m.rank,
        "local_rank": m.local_rank,
        "node_key": m.node_key,
        "attempt": m.attempt,
        "time": iso(m.time),
        "time_full": m.time.isoformat() if m.time is not None else None,
    }


def marker_from_json(j: dict[str, Any]) -> Marker:
    if not isinstance(j, dict):
        raise SchemaError("marker: not a JSON object")
    w = "marker"
    try:
        return Marker(str(j["signature"]), str(j["path"]), opt_int(j, "line", w) or 0, str(j["text"]),
                      opt_int(j, "rank", w), opt_int(j, "local_rank", w), opt_str(j, "node_key", w),
                      opt_int(j, "attempt", w) or 0, _time(j))
    except SchemaError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise SchemaError(f"marker: {exc}") from None


# -- probe snapshots and differentials ------------------------------------------------------


def _init_kwargs(cls, j: dict[str, Any], skip: set[str] = frozenset()) -> dict[str, Any]:
    names = {f.name for f in dc_fields(cls)} - set(skip)
    return {k: v for k, v in j.items() if k in names}


def snapshot_to_json(snap) -> dict[str, Any]:
    """``Snapshot.to_json()`` with every deleted-open file (no cap) and the fields that
    rebuild each reading."""
    d = snap.to_json()
    d["time_unix_full"] = snap.time
    d["discovered"] = snap.discovered
    for pj, p in zip(d["processes"], snap.processes):
        pj["deleted"] = [dict(f.to_json(), dev=f.dev, ino=f.ino) for f in p.deleted] if p.deleted is not None else None
        pj["open_mounts"] = dict(p.open_mounts) if p.open_mounts is not None else None
        pj["read_cost_s"] = p.read_cost_s
    for pj, p in zip(d["paths"], snap.paths):
        pj["mount_root"] = p.mount_root
        pj["read_cost_s"] = p.read_cost_s
    return d


def snapshot_from_json(j: dict[str, Any]):
    from denpex_tui.probes.readings import DeletedFile, PathReading, ProcessReading, Snapshot

    check_schema(j, "probe snapshot")
    procs = []
    for pj in j.get("processes") or []:
        kw = _init_kwargs(ProcessReading, pj, {"deleted"})
        if pj.get("deleted") is not None:
            kw["deleted"] = [DeletedFile(int(f["fd"]), str(f["path"]), int(f["bytes"]), int(f["size"]),
                                         int(f.get("dev") or 0), int(f.get("ino") or 0)) for f in pj["deleted"]]
        procs.append(ProcessReading(**kw))
    paths = []
    for pj in j.get("paths") or []:
        kw = _init_kwargs(PathReading, pj)
        kw["is_shm"] = bool(pj.get("shm"))
        paths.append(PathReading(**kw))
    system = j.get("system") or {}
    cost = j.get("cost_ms")
    t = j.get("time_unix_full")
    if t is None:
        t = j.get("unix_time")
    if t is None:
        t = datetime.fromisoformat(j["time"]).timestamp()
    return Snapshot(
        time=float(t), host=str(j.get("host") or ""), processes=procs, paths=paths,
        discovered=bool(j.get("discovered", True)),
        system_files_open=system.get("files_open"), system_files_max=system.get("files_max"),
        cost_s=cost / 1000 if cost is not None else None,
    )


def differential_to_json(d) -> dict[str, Any]:
    out = d.to_json()
    out["schema"] = SCHEMA
    out["measured_at_unix"] = d.measured_at_unix
    out["metrics"] = dict(d.metrics)  # unrounded
    return out


def differential_from_json(j: dict[str, Any]):
    from denpex_tui.probes.differential import Candidate, ChecklistResult, Differential

    check_schema(j, "differential")
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
        candidates=[Candidate(**_init_kwargs(Candidate, c)) for c in j.get("candidates") or []],
        checklist=[ChecklistResult(**_init_kwargs(ChecklistResult, c)) for c in j.get("checklist") or []],
        metrics=dict(j.get("metrics") or {}),
        caveats=list(j.get("caveats") or []),
        here=bool(j.get("here", True)),
        error_node=j.get("error_node"),
        measure_command=j.get("measure_command"),
    )
