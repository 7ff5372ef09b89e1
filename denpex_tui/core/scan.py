"""``denpex scan``: the history path of the pipeline over a finished (or running) job."""

from __future__ import annotations

import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .catalog import Catalog, load_catalog
from .job import JobState, ProcessorResult
from .matcher import Matcher
from .model import Finding, Incident, SourceInfo, iso
from .pipeline import SourceProcessor
from .sources import SourceError, discover, read_chunks
from .triage import triage

__all__ = ["ScanResult", "scan_paths", "process_source", "read_tail", "SCHEMA"]

SCHEMA = 1
_PARALLEL_MIN_BYTES = 48 << 20
_ERROR_JSON_MAX = 4 << 20


@dataclass
class ScanResult:
    job: JobState
    findings: list[Finding]
    incidents: list[Incident]
    warnings: list[str]
    catalog: Catalog
    elapsed_s: float = 0.0
    bytes_read: int = 0
    backend: str = ""
    first_diagnosis_s: float | None = None
    filters: dict[str, Any] = field(default_factory=dict)

    @property
    def readable_sources(self) -> int:
        return sum(1 for r in self.job.results.values() if not r.errors)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "sources": [s.to_json() for s in self.job.sources()],
            "versions": self.job.versions(),
            "findings": [f.to_json() for f in self.findings],
            "incidents": [i.to_json() for i in self.incidents],
            "warnings": list(self.warnings),
        }


_WORKER: dict[str, Any] = {}


def _worker_init(sig_dirs: list[str] | None, include_user: bool, nice: int) -> None:
    if nice:
        try:
            os.nice(nice)
        except OSError:
            pass
    cat = load_catalog(sig_dirs, include_user=include_user)
    _WORKER["matcher"] = Matcher(cat)


def _worker_run(info: SourceInfo) -> ProcessorResult:
    return process_source(info, _WORKER["matcher"])


def _year_hint(path: str) -> int | None:
    try:
        return datetime.fromtimestamp(os.stat(path).st_mtime).year
    except OSError:
        return None


def process_source(info: SourceInfo, matcher: Matcher) -> ProcessorResult:
    p = SourceProcessor(info, matcher, year_hint=_year_hint(info.path))
    try:
        if info.kind == "error-json":
            with open(info.path, "rb") as fh:
                blob = fh.read(_ERROR_JSON_MAX + 1)
            if len(blob) > _ERROR_JSON_MAX:
                p.errors.append(f"{info.path}: error file larger than 4 MiB: skipped")
            else:
                p.feed_error_json(blob)
        else:
            for off, data in read_chunks(info.path):
                p.feed(data, off)
            p.close()
    except SourceError as exc:
        p.close()
        p.errors.append(str(exc))
    except OSError as exc:
        p.close()
        p.errors.append(f"{info.path}: read error ({exc.strerror or exc})")
    return ProcessorResult.of(p)


def read_tail(path: str, end: int | None, max_bytes: int) -> bytes | None:
    """Up to ``max_bytes`` before ``end`` (or the end of the file)."""
    try:
        with open(path, "rb") as fh:
            if end is None:
                fh.seek(0, os.SEEK_END)
                end = fh.tell()
            start = max(0, end - max_bytes)
            fh.seek(start)
            return fh.read(end - start)
    except OSError:
        return None


def _parse_since(since: str | None) -> datetime | None:
    if not since:
        return None
    s = since.strip()
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    if s[-1:] in units and s[:-1].isdigit():
        return datetime.fromtimestamp(time.time() - int(s[:-1]) * units[s[-1]])
    try:
        return datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"--since {since!r}: use an ISO time (2026-11-29T17:40) or an age (30m, 2h)") from None


def scan_paths(
    paths: list[str],
    *,
    catalog: Catalog | None = None,
    signature_dirs: list[str] | None = None,
    include_user: bool = True,
    jobs: int | None = None,
    rank: int | None = None,
    attempt: int | None = None,
    since: str | None = None,
    polite: bool = False,
) -> ScanResult:
    """Scan ``paths`` (files, directories, globs) as one job."""
    t0 = time.perf_counter()
    since_dt = _parse_since(since)
    catalog = catalog or load_catalog(signature_dirs, include_user=include_user)
    matcher = Matcher(catalog)
    disc = discover(paths)
    warnings = list(disc.warnings) + [f"signatures: {p}" for p in catalog.problems]
    job = JobState()
    total = 0
    for s in disc.sources:
        try:
            total += os.path.getsize(s.path)
        except OSError:
            pass
    n_jobs = jobs or (1 if polite else (os.cpu_count() or 1))
    if n_jobs > 1 and total >= _PARALLEL_MIN_BYTES and len(disc.sources) > 1:
        # Largest files first so the pool stays busy to the end.
        order = sorted(disc.sources, key=lambda s: -_size(s.path))
        with ProcessPoolExecutor(
            max_workers=n_jobs,
            initializer=_worker_init,
            initargs=(signature_dirs, include_user, 10 if polite else 0),
        ) as pool:
            for r in pool.map(_worker_run, order, chunksize=1):
                job.add(r)
    else:
        for s in disc.sources:
            job.add(process_source(s, matcher))
    first_diag = time.perf_counter() - t0
    for r in job.results.values():
        warnings.extend(r.errors)
    incidents = triage(job, catalog, read_tail=read_tail)
    findings = job.findings()
    if attempt is not None:
        findings = [f for f in findings if f.attempt == attempt]
        incidents = [i for i in incidents if i.attempt == attempt]
    if rank is not None:
        findings = [f for f in findings if f.rank == rank]
    if since_dt is not None:
        def after(f: Finding) -> bool:
            if f.time is None:
                return True
            a, b = f.time, since_dt
            if (a.tzinfo is None) != (b.tzinfo is None):
                a, b = a.replace(tzinfo=None), b.replace(tzinfo=None)
            return a >= b

        findings = [f for f in findings if after(f)]
    if not disc.sources:
        warnings.append("no log files found in " + ", ".join(paths))
    return ScanResult(
        job=job,
        findings=findings,
        incidents=incidents,
        warnings=warnings,
        catalog=catalog,
        elapsed_s=time.perf_counter() - t0,
        bytes_read=sum(r.bytes for r in job.results.values()),
        backend=matcher.backend,
        first_diagnosis_s=first_diag,
        filters={"rank": rank, "attempt": attempt, "since": iso(since_dt)},
    )


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
