"""Evidence bundles read back: ``denpex scan BUNDLE`` and the checklist show the diagnosis
stored in a bundle (core/evidence.py writes them).

A bundle is untrusted input: its ``diagnosis.json`` is read bounded (core/untrusted.py), from
the first members of a tar only, checked against the schema, and every string in it is made
safe before anything prints it.
"""

from __future__ import annotations

import os
import tarfile
import zlib
from typing import Any

from . import schema
from .evidence import KIND
from .text import safe_str

__all__ = ["MAX_DOC", "is_bundle", "read_bundle", "bundle_scan"]

MAX_DOC = 64 << 20  # diagnosis.json read back: bounded before parsing (core/untrusted.py)


def _tar_doc(path: str) -> dict | None:
    from .untrusted import load_json, read_capped

    try:
        with tarfile.open(path, "r:gz") as tar:
            for i, m in enumerate(tar):  # a bundle writes it first: never inflate a big archive to find it
                if i > 4:
                    return None
                if m.isfile() and (m.name == "diagnosis.json" or m.name.endswith("/diagnosis.json")) \
                        and m.name.count("/") <= 1:
                    if m.size > MAX_DOC:
                        raise schema.SchemaError(f"{path}: its diagnosis.json is larger than {MAX_DOC >> 20} MiB")
                    fh = tar.extractfile(m)
                    return load_json(read_capped(fh, MAX_DOC, f"{path}: diagnosis.json"),
                                     f"{path}: diagnosis.json") if fh else None
    except (OSError, tarfile.TarError, EOFError, zlib.error):
        return None
    return None


def _load(path: str) -> dict | None:
    """The bundle's diagnosis.json, or None when ``path`` is no bundle; a bundle whose document
    is too big, too deep or not JSON raises :class:`schema.SchemaError` (one line)."""
    from .untrusted import load_json, read_capped

    if os.path.isdir(path):
        p = os.path.join(path, "diagnosis.json")
        if not os.path.isfile(p):
            return None
        try:
            with open(p, "rb") as fh:
                return load_json(read_capped(fh, MAX_DOC, p), p)
        except OSError:
            return None
    if path.endswith((".tar.gz", ".tgz")) and os.path.isfile(path):
        return _tar_doc(path)
    return None


def is_bundle(path: str, strict: bool = False) -> bool:
    """Whether ``path`` is an evidence bundle. A ``diagnosis.json`` too big or too deep to read
    raises ``ValueError`` (one line) with ``strict``, else makes it no bundle."""
    try:
        doc = _load(path)
    except ValueError:
        if strict:
            raise
        return False
    return isinstance(doc, dict) and doc.get("kind") == KIND


def _safe(v: Any) -> Any:
    """A bundle is untrusted input: no string from it reaches a terminal as a control sequence."""
    if isinstance(v, str):
        return safe_str(v)
    if isinstance(v, list):
        return [_safe(x) for x in v]
    if isinstance(v, dict):
        return {safe_str(str(k)): _safe(x) for k, x in v.items()}
    return v


def read_bundle(path: str) -> dict:
    doc = _load(path)
    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        raise schema.SchemaError(f"{path}: not a Denpex evidence bundle")
    return _safe(schema.check_schema(doc, path))


class _BundleJob:
    """The part of JobState the report and the fix panel read, rebuilt from a bundle."""

    def __init__(self, scan: dict):
        from .job import SourceSummary

        w = "bundle source"
        self._sources = []
        for s in schema.opt_list(scan, "sources", "bundle scan", dict):
            ranks = schema.opt_list(s, "ranks", w)
            if not all(isinstance(r, int) and not isinstance(r, bool) for r in ranks):
                raise schema.SchemaError(f"{w}: 'ranks' must be a list of integers")
            self._sources.append(SourceSummary(str(s.get("path") or ""), str(s.get("kind") or "log"), list(ranks),
                                               schema.opt_str(s, "node", w), schema.opt_int(s, "lines", w) or 0,
                                               schema.opt_int(s, "bytes", w) or 0, schema.opt_str(s, "error", w)))
        self._versions = {str(k): str(v) for k, v in schema.opt_dict(scan, "versions", "bundle scan").items()}
        self._markers = [schema.marker_from_json(m) for m in schema.opt_list(scan, "markers", "bundle scan")]
        ranks = schema.opt_list(scan, "ranks", "bundle scan")  # the job's own count (older bundles: its sources')
        if not all(isinstance(r, int) and not isinstance(r, bool) for r in ranks):
            raise schema.SchemaError("bundle scan: 'ranks' must be a list of integers")
        self._ranks = sorted(set(ranks) | {r for s in self._sources for r in s.ranks})

    def sources(self):
        return list(self._sources)

    def ranks(self):
        return list(self._ranks)

    def versions(self):
        return dict(self._versions)

    def markers(self):
        return list(self._markers)

    def failure_entries(self):
        return []


def bundle_scan(path: str, catalog):
    """A ScanResult rebuilt from a bundle: the diagnosis as it was when the bundle was made."""
    from .scan import ScanResult

    doc = read_bundle(path)
    scan = schema.opt_dict(doc, "scan", path)
    return ScanResult(
        job=_BundleJob(scan),  # type: ignore[arg-type]
        findings=[schema.finding_from_json(f) for f in schema.opt_list(scan, "findings", path)],
        incidents=[schema.incident_from_json(i) for i in schema.opt_list(scan, "incidents", path)],
        warnings=[str(w) for w in schema.opt_list(scan, "warnings", path)] + [f"read back from the evidence bundle {path} "
                                                                f"(made {doc.get('created')})"],
        catalog=catalog,
    )
