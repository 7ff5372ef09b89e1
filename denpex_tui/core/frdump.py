"""PyTorch Flight Recorder dumps: telling one from a log, and reading one (JSON or pickle).

Each rank's Flight Recorder keeps a ring buffer of its collectives (``TORCH_FR_BUFFER_SIZE``,
default 2000 entries; ``TORCH_NCCL_TRACE_BUFFER_SIZE`` is the old name). ProcessGroupNCCL
writes it on a timeout or an exception (``TORCH_NCCL_DUMP_ON_TIMEOUT``) to
``$TORCH_FR_DUMP_TEMP_FILE<rank>`` (``TORCH_NCCL_DEBUG_INFO_TEMP_FILE`` is the old name;
default ``$XDG_CACHE_HOME/torch/comm_lib_trace_rank_<rank>``, else ``~/.cache/torch/...``, and
``/tmp/nccl_trace_rank_<rank>`` before torch 2.5) as a pickle; ``_dump_fr_trace_json`` and the
control-plane handler ``fr_trace_json`` give the same data as JSON. gloo records the buffer
too but, in torch 2.13, never writes it by itself.

A dump is untrusted input: it is read whole but bounded (:data:`MAX_DUMP_BYTES`), pickles go
through :mod:`~denpex_tui.core.safepickle` (plain data only, nothing runs), and every field is
checked for its type, every string made safe (:func:`~denpex_tui.core.text.safe_str`). Pure:
no I/O here beyond the bytes given.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field

from .safepickle import UnsafePickle, loads_plain
from .text import safe_str

__all__ = ["FREntry", "FRDump", "DumpError", "parse_dump", "sniff_dump", "rank_from_name",
           "looks_like_dump_name", "MAX_DUMP_BYTES", "MAX_ENTRIES"]

MAX_DUMP_BYTES = 64 << 20
MAX_ENTRIES = 100_000
MAX_FRAMES = 32
_MAX_STR = 4096
_MAX_DIMS = 16

# <prefix><rank>, the writer's convention (DebugInfoWriter: prefix + rank), with the extension
# a person may add to a copy (.json for a control-plane answer saved to a file, .pkl)
_RANK_SUFFIX = re.compile(r"(?<![0-9])(\d{1,7})(?:\.(?:json|pkl|pickle))?$")
_DUMPISH = re.compile(r"(?i)(?:trace|flight|fr)[^/]*?_?\d{1,7}(?:\.(?:json|pkl|pickle))?$")


class DumpError(ValueError):
    """A file that is not a readable Flight Recorder dump; the message is one line."""


@dataclass(frozen=True)
class FREntry:
    """One collective (or p2p op) as a rank's Flight Recorder recorded it."""

    record_id: int
    pg: str  # process group name (process_group[0])
    pg_desc: str  # its description (process_group[1]: "default_pg", "TP", ...)
    seq: int  # collective_seq_id
    p2p_seq: int
    is_p2p: bool
    op: str  # profiling_name, e.g. "nccl:all_reduce", "gloo:barrier"
    input_sizes: tuple
    input_dtypes: tuple
    output_sizes: tuple
    output_dtypes: tuple
    state: str  # scheduled | started | completed
    retired: bool | None
    time_created_ns: int | None
    time_started_ns: int | None
    time_completed_ns: int | None
    timeout_ms: int | None
    frames: tuple = ()  # (name, filename, line) innermost first

    @property
    def fingerprint(self) -> tuple:
        """What must agree across ranks for the same sequence id."""
        return (self.op, self.input_sizes, self.input_dtypes, self.output_sizes, self.output_dtypes)

    def describe(self) -> str:
        sizes = ",".join("x".join(str(d) for d in s) or "scalar" for s in self.input_sizes) or "no tensor"
        dt = ",".join(sorted(set(self.input_dtypes)))
        return f"{self.op} [{sizes}]{' ' + dt if dt else ''}"


@dataclass
class FRDump:
    path: str
    rank: int | None
    fmt: str  # "json" | "pickle"
    version: str
    entries: list[FREntry]
    pg_config: dict[str, tuple[str, tuple[int, ...]]]  # name -> (desc, ranks)
    pg_status: dict[str, dict[str, int]]  # pg id -> last_enqueued/started/completed_collective
    size: int = 0
    mtime: float | None = None
    skipped: int = 0  # entries that were not well formed
    notes: list[str] = field(default_factory=list)

    @property
    def newest(self) -> int:
        return max((e.record_id for e in self.entries), default=-1)


def rank_from_name(path: str) -> int | None:
    m = _RANK_SUFFIX.search(os.path.basename(path))
    return int(m.group(1)) if m else None


def looks_like_dump_name(name: str) -> bool:
    """A name a dump may have in a folder (``comm_lib_trace_rank_3``, ``nccl_trace_rank_3``,
    ``fr_trace_rank_3.json``, ``flight_recorder_3.pkl``); the content decides (:func:`sniff_dump`)."""
    return bool(_DUMPISH.search(name))


def sniff_dump(head: bytes) -> str | None:
    """'pickle' or 'json' when the first bytes look like a Flight Recorder dump, else None."""
    h = head.lstrip()
    if h[:2] in (b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05") and any(
            k in head for k in (b"pg_config", b"pg_status", b"collective_seq_id", b"nccl_comm_state")):
        return "pickle"
    if h[:1] == b"{" and any(k in head for k in (b'"comm_lib_version"', b'"collective_seq_id"', b'"pg_config"',
                                                  b'"pg_status"', b'"nccl_comm_state"')):
        return "json"
    return None


def _s(v, limit: int = _MAX_STR) -> str:
    if isinstance(v, bytes):
        v = v.decode("utf-8", "replace")
    return safe_str(str(v)[:limit]) if v is not None else ""


def _i(v) -> int | None:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v if abs(v) < 1 << 63 else None
    if isinstance(v, str) and re.fullmatch(r"-?\d{1,19}", v.strip()):
        return int(v)
    if isinstance(v, float) and v == v and abs(v) < 1e18:
        return int(v)
    return None


def _sizes(v) -> tuple:
    if not isinstance(v, (list, tuple)):
        return ()
    out = []
    for s in v[:_MAX_DIMS]:
        if isinstance(s, (list, tuple)):
            out.append(tuple(x for x in (_i(d) for d in s[:_MAX_DIMS]) if x is not None))
    return tuple(out)


def _dtypes(v) -> tuple:
    if not isinstance(v, (list, tuple)):
        return ()
    return tuple(_s(d, 32) for d in v[:_MAX_DIMS])


def _frames(v) -> tuple:
    if not isinstance(v, (list, tuple)):
        return ()
    out = []
    for f in v[:MAX_FRAMES]:
        if isinstance(f, dict):
            out.append((_s(f.get("name"), 200), _s(f.get("filename"), 500), _i(f.get("line")) or 0))
    return tuple(out)


def _entry(d) -> FREntry | None:
    if not isinstance(d, dict):
        return None
    pg = d.get("process_group")
    if isinstance(pg, (list, tuple)) and len(pg) >= 2:
        pg_name, pg_desc = _s(pg[0], 200), _s(pg[1], 200)
    else:
        pg_name, pg_desc = _s(d.get("pg_id", ""), 200), ""
    seq = _i(d.get("collective_seq_id"))
    rid = _i(d.get("record_id"))
    op = _s(d.get("profiling_name"), 200)
    if seq is None or rid is None or not op:
        return None
    state = _s(d.get("state"), 32) or "scheduled"
    retired = d.get("retired")
    return FREntry(
        record_id=rid, pg=pg_name, pg_desc=pg_desc, seq=seq, p2p_seq=_i(d.get("p2p_seq_id")) or 0,
        is_p2p=bool(d.get("is_p2p")), op=op,
        input_sizes=_sizes(d.get("input_sizes")), input_dtypes=_dtypes(d.get("input_dtypes")),
        output_sizes=_sizes(d.get("output_sizes")), output_dtypes=_dtypes(d.get("output_dtypes")),
        state=state if state in ("scheduled", "started", "completed") else "scheduled",
        retired=bool(retired) if isinstance(retired, bool) else None,
        time_created_ns=_i(d.get("time_created_ns")),
        time_started_ns=_i(d.get("time_discovered_started_ns")) or None,
        time_completed_ns=_i(d.get("time_discovered_completed_ns")) or None,
        timeout_ms=_i(d.get("timeout_ms")), frames=_frames(d.get("frames")),
    )


def _ranks(v) -> tuple[int, ...]:
    if isinstance(v, str):  # "[0, 1, 2, 3]": read as numbers, never evaluated
        return tuple(int(x) for x in re.findall(r"\d{1,7}", v[:1 << 20]))
    if isinstance(v, (list, tuple)):
        return tuple(x for x in (_i(r) for r in v) if x is not None)
    return ()


def parse_dump(data: bytes, path: str = "", *, rank: int | None = None) -> FRDump:
    """The dump in ``data`` (the whole file). ``rank`` defaults to the one the file name ends
    with (torch writes ``<prefix><rank>``; a dump does not say whose it is)."""
    if len(data) > MAX_DUMP_BYTES:
        raise DumpError(f"{safe_str(path)}: larger than {MAX_DUMP_BYTES >> 20} MiB: not read")
    kind = sniff_dump(data[:65536])
    if kind is None:
        raise DumpError(f"{safe_str(path)}: not a Flight Recorder dump")
    try:
        if kind == "json":
            raw = json.loads(data.decode("utf-8", "replace"))
        else:
            raw = loads_plain(data)
    except UnsafePickle as exc:
        raise DumpError(f"{safe_str(path)}: pickle refused: {safe_str(str(exc))}") from None
    except (ValueError, RecursionError) as exc:
        raise DumpError(f"{safe_str(path)}: not valid JSON ({safe_str(str(exc))[:100]})") from None
    if not isinstance(raw, dict):
        raise DumpError(f"{safe_str(path)}: not a Flight Recorder dump (no top-level dict)")
    entries: list[FREntry] = []
    skipped = 0
    raw_entries = raw.get("entries") or []
    if not isinstance(raw_entries, list):
        raw_entries = []
    for d in raw_entries[:MAX_ENTRIES]:
        e = _entry(d)
        if e is None:
            skipped += 1
        else:
            entries.append(e)
    notes = []
    if len(raw_entries) > MAX_ENTRIES:
        notes.append(f"only the first {MAX_ENTRIES} of {len(raw_entries)} entries read")
    cfg: dict[str, tuple[str, tuple[int, ...]]] = {}
    pc = raw.get("pg_config")
    if isinstance(pc, dict):
        for name, v in list(pc.items())[:10_000]:
            if isinstance(v, dict):
                cfg[_s(name, 200)] = (_s(v.get("desc"), 200), _ranks(v.get("ranks")))
    status: dict[str, dict[str, int]] = {}
    ps = raw.get("pg_status")
    if isinstance(ps, dict):
        for pg_id, v in list(ps.items())[:10_000]:
            if isinstance(v, dict):
                status[_s(pg_id, 200)] = {k: x for k, x in ((_s(k, 64), _i(x)) for k, x in v.items()) if x is not None}
    return FRDump(path=path, rank=rank if rank is not None else rank_from_name(path), fmt=kind,
                  version=_s(raw.get("version"), 32), entries=entries, pg_config=cfg, pg_status=status,
                  size=len(data), skipped=skipped, notes=notes)
