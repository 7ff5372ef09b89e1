"""``denpex evidence``: what a colleague needs to judge the failure without the cluster.

A bundle is a folder (or the same folder as ``OUT.tar.gz``):

* ``README.txt``: what each file is, how and when the bundle was made, the size cap;
* ``diagnosis.txt`` / ``diagnosis.json``: the diagnosis as ``denpex scan`` prints it, and the
  same in JSON (core/schema.py forms, so ``denpex scan BUNDLE`` shows the same diagnosis);
* ``excerpts/rank<R>-<role>.txt``: for the initiating rank and each collateral (and same-cause)
  rank, the first occurrence of its signature with ``BEFORE`` lines before and ``AFTER`` after,
  from that rank's own file, every line with its file line number;
* ``probe.json``: the probe snapshot taken now, with its time and the node it was taken on
  (not the failure's time: said in the file);
* ``env/``: ``nvidia-smi`` and ``python -m torch.utils.collect_env`` output, only with
  ``--with-env``.

Whole logs are never copied: each excerpt holds at most ``BEFORE + 1 + AFTER`` lines of at
most ``MAX_LINE`` bytes, and the bundle stops adding excerpts at ``MAX_BYTES`` (the ranks left
out are named in README.txt).
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import shutil
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from . import schema
from .text import safe_line, safe_str

__all__ = ["BEFORE", "AFTER", "MAX_LINE", "MAX_BYTES", "KIND", "write_bundle", "is_bundle", "read_bundle",
           "bundle_scan", "excerpt"]

BEFORE, AFTER = 100, 20
MAX_LINE = 4096
MAX_BYTES = 16 << 20
KIND = "denpex-evidence"
_NAME = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass
class Excerpt:
    rank: int | None
    role: str
    signature: str
    path: str
    line: int
    first: int
    last: int
    text: str

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "role": self.role, "signature": self.signature, "path": safe_str(self.path),
                "line": self.line, "from_line": self.first, "to_line": self.last}


def excerpt(path: str, line: int, before: int = BEFORE, after: int = AFTER) -> tuple[int, int, str]:
    """Lines ``line-before .. line+after`` of ``path`` (1-based), numbered, as safe text."""
    lo = max(1, line - before)
    out = []
    last = lo - 1
    with open(path, "rb") as fh:
        for n, raw in enumerate(fh, 1):
            if n < lo:
                continue
            if n > line + after:
                break
            raw = raw.rstrip(b"\r\n")
            cut = len(raw) > MAX_LINE
            text = safe_line(raw[:MAX_LINE]).text + (" [line cut at 4 KiB]" if cut else "")
            out.append(f"{'>' if n == line else ' '}{n:>8}: {text}")
            last = n
    return lo, last, "\n".join(out) + "\n"


def _line_at(path: str, t) -> int | None:
    """The last line of ``path`` logged at or before ``t`` (the rank's other file: its stdout
    when the traceback went to stderr), or its last line when ``t`` is unknown."""
    from .lines.facts import line_facts

    best, n = None, 0
    tt = t.replace(tzinfo=None) if t is not None else None
    with open(path, "rb") as fh:
        for n, raw in enumerate(fh, 1):
            if tt is None:
                continue
            lt = line_facts(raw[:512]).time
            if lt is not None:
                if lt.replace(tzinfo=None) > tt:
                    break
                best = n
    return best if tt is not None else (n or None)


def _findings_to_excerpt(result) -> list[tuple[str, Any]]:
    out = []
    for inc in result.incidents:
        if inc.initiating:
            out.append(("initiating", inc.initiating))
        out += [("same-cause", f) for f in inc.same_cause]
        out += [("collateral", f) for f in inc.collateral]
    seen, uniq = set(), []
    for role, f in out:
        k = (f.attempt, f.rank, f.signature, f.path)
        if k not in seen:
            seen.add(k)
            uniq.append((role, f))
    return uniq


@dataclass
class Bundle:
    path: str
    files: dict[str, int] = field(default_factory=dict)
    left_out: list[str] = field(default_factory=list)


def write_bundle(result, out: str, *, argv: list[str], diagnosis_text: str, snapshot=None,
                 differential=None, baseline=None, first_warnings: dict | None = None,
                 env: dict[str, tuple[list[str], Callable[[], str]]] | None = None) -> Bundle:
    """Write the bundle for a scan ``result`` to ``out`` (a folder, or ``*.tar.gz``)."""
    as_tar = out.endswith((".tar.gz", ".tgz"))
    final = out
    if os.path.exists(final) and (as_tar or os.listdir(final)):
        raise FileExistsError(f"{final}: exists already (evidence never overwrites)")
    work = tempfile.mkdtemp(prefix="denpex-evidence-") if as_tar else final
    os.makedirs(work, exist_ok=True)
    b = Bundle(final)
    budget = MAX_BYTES

    def put(rel: str, text: str) -> None:
        nonlocal budget
        data = text.encode("utf-8", "backslashreplace")  # a lone surrogate (a hostile argv in the snapshot)
        p = os.path.join(work, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as fh:
            fh.write(data)
        b.files[rel] = len(data)
        budget -= len(data)

    excerpts: list[Excerpt] = []
    for role, f in _findings_to_excerpt(result):
        who = f"rank {f.rank}" if f.rank is not None else "rank ?"
        if budget <= 0:
            b.left_out.append(f"{who} ({role}, {f.signature}): over the {MAX_BYTES >> 20} MiB cap")
            continue
        try:
            lo, hi, text = excerpt(f.path, f.line)
        except OSError as exc:
            b.left_out.append(f"{who} ({role}): {safe_str(f.path)} unreadable ({exc.strerror or exc})")
            continue
        ex = Excerpt(f.rank, role, f.signature, f.path, f.line, lo, hi, text)
        name = _NAME.sub("_", f"rank{f.rank if f.rank is not None else 'X'}-{role}-{f.signature}")
        head = (f"# {safe_str(f.path)} lines {lo}-{hi}: the first {f.signature} of rank {f.rank} ({role}) "
                f"at line {f.line} (marked >)\n")
        put(f"excerpts/{name}.txt", head + text)
        excerpts.append(ex)
        for s in result.job.sources():  # the rank's other files, up to the failure's time
            if s.ranks != [f.rank] or s.path == f.path or s.kind == "error-json" or f.rank is None:
                continue
            try:
                at = _line_at(s.path, f.time)
                if at is None:
                    continue
                lo, hi, text = excerpt(s.path, at)
            except OSError:
                continue
            other = _NAME.sub("_", os.path.basename(s.path))
            head = (f"# {safe_str(s.path)} lines {lo}-{hi}: rank {f.rank}'s other file, around the time of its "
                    f"first {f.signature} (line {at}, marked >, is the last one logged at or before it)\n")
            put(f"excerpts/{name}.{other}.txt", head + text)
            excerpts.append(Excerpt(f.rank, role + " (same rank, other file)", f.signature, s.path, at, lo, hi, text))
    # the Flight Recorder dumps the diagnosis used, as read (plain JSON: a pickle is never copied on)
    fr = result.job.flight_recorder() if hasattr(result.job, "flight_recorder") else None
    for r, d in sorted((fr.dumps if fr else {}).items()):
        body = {"path": safe_str(d.path), "rank": r, "format": d.fmt, "version": d.version,
                "pg_config": {k: [v[0], list(v[1])] for k, v in d.pg_config.items()}, "pg_status": d.pg_status,
                "entries": [dataclasses.asdict(e) for e in d.entries]}
        text = json.dumps(body, ensure_ascii=False) + "\n"
        if len(text) > budget:
            b.left_out.append(f"rank {r}'s Flight Recorder dump: over the {MAX_BYTES >> 20} MiB cap")
            continue
        put(f"flight_recorder/rank{r}.json", text)
    doc = {
        "schema": schema.SCHEMA,
        "kind": KIND,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "argv": [safe_str(a) for a in argv],
        "scan": {
            "sources": [s.to_json() for s in result.job.sources()],
            "versions": result.job.versions(),
            "findings": [schema.finding_to_json(f) for f in result.findings],
            "incidents": [schema.incident_to_json(i) for i in result.incidents],
            "markers": [schema.marker_to_json(m) for m in result.job.markers()],
            "warnings": list(result.warnings),
        },
        "first_warnings": {str(k): v for k, v in (first_warnings or {}).items()},
        "excerpts": [e.to_json() for e in excerpts],
        "verify_baseline": baseline.to_json() if baseline is not None else None,
        "left_out": list(b.left_out),
    }
    put("diagnosis.json", json.dumps(doc, ensure_ascii=False, indent=1) + "\n")
    put("diagnosis.txt", diagnosis_text)
    if snapshot is not None:
        probe = {"note": "measured when the bundle was made, on the node named by host: not at failure time",
                 "snapshot": schema.snapshot_to_json(snapshot),
                 "differential": schema.differential_to_json(differential) if differential is not None else None}
        put("probe.json", json.dumps(probe, ensure_ascii=False, indent=1) + "\n")
    for rel, (cmd, run) in (env or {}).items():
        put(f"env/{rel}", "$ " + " ".join(cmd) + "\n" + run())
    put("README.txt", _readme(doc, b, snapshot, env))
    if as_tar:
        top = os.path.basename(final)[: -len(".tar.gz") if final.endswith(".tar.gz") else -len(".tgz")] or "evidence"
        tmp = final + ".part"
        with tarfile.open(tmp, "w:gz") as tar:  # diagnosis.json first: read back without reading the rest
            tar.add(work, arcname=top, recursive=False)
            first = ["diagnosis.json", "README.txt"]
            for rel in first + sorted(x for x in os.listdir(work) if x not in first):
                tar.add(os.path.join(work, rel), arcname=f"{top}/{rel}")
        os.replace(tmp, final)
        shutil.rmtree(work, ignore_errors=True)
    return b


def _readme(doc: dict, b: Bundle, snapshot, env) -> str:
    lines = [
        "Denpex evidence bundle",
        "",
        f"Made {doc['created']} by: {' '.join(doc['argv'])}",
        "Read it back with: denpex scan <this folder or .tar.gz>  (shows the same diagnosis)",
        "",
        "Files:",
        "  diagnosis.txt   the diagnosis as `denpex scan` printed it: initiating rank, collateral ranks, cause, fix",
        "  diagnosis.json  the same as JSON (schema 1): sources, versions the logs print, findings, incidents,",
        "                  the first related warning per rank, and where the signature appeared (for `denpex verify --from`)",
    ]
    for e in doc["excerpts"]:
        what = (f"lines around the time of rank {e['rank']}'s first {e['signature']} (line {e['line']})"
                if "other file" in e["role"] else f"first {e['signature']} of rank {e['rank']} at line {e['line']}")
        lines.append(f"  excerpts/ ({e['role']})  {e['path']} lines {e['from_line']}-{e['to_line']}: {what}")
    if snapshot is not None:
        lines.append(f"  probe.json      probe snapshot (free bytes/inodes, fds, deleted-open files) taken now on host "
                     f"{safe_str(snapshot.host)}, not at failure time")
    for rel in env or {}:
        lines.append(f"  env/{rel}")
    if not env:
        lines.append("  (no env/: nvidia-smi and collect_env run only with --with-env)")
    v = doc["scan"]["versions"]
    lines += ["", "Versions the logs print: " + (", ".join(f"{k} {x}" for k, x in sorted(v.items())) or "none found")]
    lines += ["", f"Size cap: each excerpt is at most {BEFORE} lines before the signature and {AFTER} after, "
              f"lines cut at {MAX_LINE} bytes; no excerpt is added past {MAX_BYTES >> 20} MiB in total. "
              "Whole logs are never copied."]
    if b.left_out:
        lines += ["", "Left out:"] + [f"  {x}" for x in b.left_out]
    return "\n".join(lines) + "\n"


# -- reading back -------------------------------------------------------------------------


def _tar_doc(path: str) -> dict | None:
    try:
        with tarfile.open(path, "r:gz") as tar:
            for i, m in enumerate(tar):  # a bundle lists it among its first files; never read a big archive
                if i > 64:
                    return None
                if m.isfile() and (m.name == "diagnosis.json" or m.name.endswith("/diagnosis.json")) \
                        and m.name.count("/") <= 1 and m.size < (256 << 20):
                    fh = tar.extractfile(m)
                    return json.load(io.TextIOWrapper(fh, encoding="utf-8")) if fh else None
    except (OSError, tarfile.TarError, ValueError, EOFError):
        return None
    return None


def _load(path: str) -> dict | None:
    if os.path.isdir(path):
        p = os.path.join(path, "diagnosis.json")
        if not os.path.isfile(p):
            return None
        try:
            with open(p, "rb") as fh:
                return json.loads(fh.read(256 << 20))
        except (OSError, ValueError):
            return None
    if path.endswith((".tar.gz", ".tgz")) and os.path.isfile(path):
        return _tar_doc(path)
    return None


def is_bundle(path: str) -> bool:
    doc = _load(path)
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

        self._sources = [SourceSummary(s["path"], s["kind"], list(s.get("ranks") or []), s.get("node"),
                                       int(s.get("lines") or 0), int(s.get("bytes") or 0), s.get("error"))
                         for s in scan.get("sources") or []]
        self._versions = dict(scan.get("versions") or {})
        self._markers = [schema.marker_from_json(m) for m in scan.get("markers") or []]

    def sources(self):
        return list(self._sources)

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
    scan = doc.get("scan") or {}
    return ScanResult(
        job=_BundleJob(scan),  # type: ignore[arg-type]
        findings=[schema.finding_from_json(f) for f in scan.get("findings") or []],
        incidents=[schema.incident_from_json(i) for i in scan.get("incidents") or []],
        warnings=[str(w) for w in scan.get("warnings") or []] + [f"read back from the evidence bundle {path} "
                                                                f"(made {doc.get('created')})"],
        catalog=catalog,
    )
