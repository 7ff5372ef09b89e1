"""The second founding entry's leak, named from measurements: deleted checkpoints still held open.

DeepSpeed's FastFileWriter (0.17.1 to 0.19.0, with ``checkpoint.writer`` in the config) never
closed its fd; with checkpoint rotation the unlinked files stay open and their blocks are never
freed, until a write fails with ENOSPC (deepspeedai/DeepSpeed#8003, fixed by PR #8005). The log says
only ``No space left on device``: a full disk and this leak print the same line. What tells them
apart is measured on the node (:mod:`.differential`):

* the trainer holds **deleted-but-open** files on the failing filesystem (the ``deleted-open``
  candidate: df used above du, or the watched processes' ``(deleted)`` fds), or
* its fd count **grows with every checkpoint save** and is not given back (the ``fd-leak``
  candidate, from the trends of a live probe),

while the space itself is not exhausted by visible files. :func:`name_leak` says so from a
differential, live (``watch``'s probes) or read back from an evidence bundle's ``probe.json``
(:func:`leak_from_probe_json`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .candidates import LIKELY
from .differential import Differential, differential, differential_kind
from .wire import WireError, snapshot_from_json

__all__ = ["LeakVerdict", "name_leak", "leak_from_probe_json", "read_probe_json", "name_leak_in_bundle", "LEAK_ID"]

LEAK_ID = "deepspeed.fastfilewriter-fd-leak"


@dataclass
class LeakVerdict:
    named: bool
    why: str
    measured_at: str | None = None


def _gib(n: float | int | None) -> str:
    return "?" if n is None else f"{n / (1 << 30):.2f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.1f} MiB"


def name_leak(diff: Differential) -> LeakVerdict | None:
    """The leak named (or not) by the differential of an ENOSPC-class failure; None when the
    differential is not about space."""
    if diff is None or diff.kind != "enospc":
        return None
    by = {c.cause: c for c in diff.candidates}
    held = by.get("deleted-open")
    leak = by.get("fd-leak")
    blocks = by.get("blocks")
    if held is not None and held.verdict == LIKELY:
        holders = held.measured.get("holders") or []
        who = ", ".join(f"pid {h['pid']}" + (f" (rank {h['rank']})" if h.get("rank") is not None else "")
                        + f" {_gib(h.get('deleted_open_bytes'))} in {h.get('deleted_open_files')} file(s)"
                        for h in holders[:4]) or "processes not watched here"
        why = (f"deleted checkpoint files are still held open: {held.evidence}; held by {who}. Rotation deleted "
               "them, the writer never closed them, so their blocks were never freed: the fd leak of "
               f"{LEAK_ID} (DeepSpeed 0.17.1-0.19.0 with checkpoint.writer; any writer that keeps deleted files "
               "open does the same), not a disk filled by the checkpoints you can see")
        if blocks is not None and blocks.verdict != LIKELY:
            why += f"; {blocks.evidence}"
        return LeakVerdict(True, why, diff.measured_at)
    if leak is not None and leak.verdict == LIKELY:
        return LeakVerdict(True, f"{leak.evidence}: fds opened by every save and never closed, the leak of {LEAK_ID}",
                           diff.measured_at)
    return LeakVerdict(False, "no deleted-but-open files and no fd growth per save measured: nothing points at the "
                       "leak (" + (held.evidence if held is not None else "deleted-open files not measured") + ")",
                       diff.measured_at)


def leak_from_probe_json(probe: dict[str, Any], signature: str, path: str | None) -> LeakVerdict | None:
    """The verdict from an evidence bundle's ``probe.json`` (its snapshot, read as the probes
    wrote it), for the bundle's initiating ``signature`` and the ``path`` its error names. No
    ``du`` is run: the bundle's paths may not exist where it is read."""
    if not differential_kind(signature) or not isinstance(probe, dict) or not probe.get("snapshot"):
        return None
    try:
        snap = snapshot_from_json(probe["snapshot"])
    except WireError:
        return None  # a damaged snapshot says nothing about a leak
    return name_leak(differential(signature, path, snap, du=False))


_MAX_PROBE = 64 << 20


def read_probe_json(bundle: str) -> dict | None:
    """A bundle's ``probe.json`` (a folder or a ``.tar.gz``), or None. Untrusted: bounded in size,
    never extracted to disk; only a top-level (or one-folder-deep) ``probe.json`` is read."""
    import io
    import json
    import os
    import tarfile

    try:
        if os.path.isdir(bundle):
            p = os.path.join(bundle, "probe.json")
            if not os.path.isfile(p) or os.path.getsize(p) > _MAX_PROBE:
                return None
            with open(p, "rb") as fh:
                doc = json.loads(fh.read(_MAX_PROBE))
        else:
            doc = None
            with tarfile.open(bundle, "r:gz") as tar:
                for i, m in enumerate(tar):
                    if i > 256:
                        break
                    if m.isfile() and m.name.rsplit("/", 1)[-1] == "probe.json" and m.name.count("/") <= 1 \
                            and m.size < _MAX_PROBE:
                        fh = tar.extractfile(m)
                        doc = json.load(io.TextIOWrapper(fh, encoding="utf-8")) if fh else None
                        break
    except (OSError, ValueError, EOFError, tarfile.TarError):
        return None
    return doc if isinstance(doc, dict) else None


def name_leak_in_bundle(result, bundle: str) -> LeakVerdict | None:
    """The leak named on a bundle's diagnosis (``denpex scan BUNDLE``): the initiating finding of its
    first incident, measured by the bundle's own probe readings. When they name it, the finding
    becomes :data:`LEAK_ID` (``seen_as`` keeps what the logs said) and the evidence says why."""
    from denpex_tui.core.text import safe_str

    probe = read_probe_json(bundle)
    inc = next((i for i in result.incidents if i.initiating is not None), None)
    if probe is None or inc is None:
        return None
    f = inc.initiating
    try:
        v = leak_from_probe_json(probe, f.signature, f.fields.get("path"))
    except (ValueError, TypeError, KeyError):
        return None
    if v is None:
        return None
    if not v.named:  # the stored diagnosis stands as it was
        return v
    at = f" (measured {v.measured_at}, when the bundle was made)" if v.measured_at else ""
    inc.evidence.append(safe_str("probe readings: " + v.why + at))
    if f.signature != LEAK_ID:
        sig = result.catalog.get(LEAK_ID)
        f.fields = {**f.fields, "seen_as": f.signature}
        f.signature = LEAK_ID
        if sig is not None:
            f.title, f.family, f.phase = sig.title, sig.family, sig.phase
        inc.summary = inc.summary.replace(inc.summary.split(": ", 1)[-1].split(" - ", 1)[0], f.title, 1)
    return v
