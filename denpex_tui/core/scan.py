"""``denpex scan``: the history path of the pipeline over a finished (or running) job."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .catalog import Catalog, load_catalog
from .history import IO_TIMEOUT_S, SourceHistory, read_history
from .job import JobState, ProcessorResult
from .lines.reader import read_tail
from .matcher import Matcher
from .patterns import HYPERSCAN_WORTH
from .model import Finding, Incident, SourceInfo, iso
from .sources import Discovery, classify, discover
from .text import safe_str
from .triage import triage
from .watchdog import watchdog

__all__ = ["ScanResult", "scan_paths", "read_tail", "read_evidence", "EVIDENCE_KINDS", "SCHEMA"]

SCHEMA = 1


@dataclass
class ScanResult:
    job: JobState
    findings: list[Finding]
    incidents: list[Incident]
    warnings: list[str]
    catalog: Catalog
    bytes_read: int = 0
    backend: str = ""
    filters: dict[str, Any] = field(default_factory=dict)

    @property
    def readable_sources(self) -> int:
        # a source that stopped answering after some of it was read still counts: what was
        # found in it is kept (see process_source)
        return (sum(1 for r in self.job.results.values() if not r.errors or r.bytes)
                + len(getattr(self.job, "dumps", {})) + len(getattr(self.job, "ras", {})))

    def nothing_read(self, paths: list[str]) -> str:
        """Why nothing could be read, as one line: the problem itself when there is one (``x: no
        such file or directory``), else the first of them and how many more."""
        why = [w for w in self.warnings if not w.startswith(_NO_LOGS)] or list(self.warnings)
        if len(why) == 1:
            return why[0]
        head = "nothing could be read in " + ", ".join(paths)
        if not why:
            return head
        return f"{head}: {why[0]}" + (f" (+{len(why) - 1} more)" if len(why) > 1 else "")

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "sources": [s.to_json() for s in self.job.sources()],
            "ranks": self.job.ranks(),
            "versions": self.job.versions(),
            "findings": [f.to_json() for f in self.findings],
            "incidents": [i.to_json() for i in self.incidents],
            "unrecognised": [] if self.incidents else [
                {**u, "path": safe_str(u["path"])} for u in self.job.unknown_lines()],
            "warnings": list(self.warnings),
        }


_NO_LOGS = "no log files found in "


EVIDENCE_KINDS = ("fr-dump", "ras")


def read_evidence(path: str, kind: str, job: JobState, warnings: list[str]) -> bool:
    """Read a Flight Recorder dump or a RAS report whole (bounded, through the reader's guards:
    never a FIFO or a device) into ``job``; a file that cannot be read or parsed is one warning.
    True when it was added."""
    import os

    from .frdump import MAX_DUMP_BYTES, DumpError, parse_dump
    from .ras import parse_ras

    data = read_tail(path, None, MAX_DUMP_BYTES + 1)
    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        data = None
    if data is None:
        warnings.append(f"{safe_str(path)}: cannot be read")
        return False
    if kind == "ras":
        job.add_ras(parse_ras(data.decode("utf-8", "replace"), path))
        return True
    try:
        d = parse_dump(data, path)
    except DumpError as exc:
        warnings.append(str(exc))
        return False
    d.mtime = mtime
    if d.rank is None:
        warnings.append(f"{safe_str(path)}: a Flight Recorder dump whose name gives no rank "
                        "(torch names them <prefix><rank>): not used")
        return False
    job.add_dump(d)
    return True


def _results(sources: list[SourceInfo], matcher: Matcher, job: JobState, *, jobs: int | None, polite: bool,
             io_timeout: float | None, unknown_only: bool = False, progress_steps: bool = False) -> None:
    """Every source's history through the pipeline, into the job (closed: the job is finished)."""

    def add(h: SourceHistory) -> None:
        h.processor.close()
        r = ProcessorResult.of(h.processor)
        if h.progress is not None:
            r.progress = h.progress.result()
        job.add(r)

    read_history(sources, matcher, add, jobs=jobs, polite=polite, io_timeout=io_timeout, unknown_only=unknown_only,
                 progress_steps=progress_steps)


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
    io_timeout: float | None = IO_TIMEOUT_S,
    confine=None,
    progress_steps_max: int = 0,
) -> ScanResult:
    """Scan ``paths`` (files, directories, globs) as one job. ``confine(path)``: why a
    discovered file must not be read (an evidence bundle takes nothing from outside the job's
    tree), or None; such files are left out with that warning. ``progress_steps_max``: when the
    job's logs are at most this many bytes, the pass also counts each rank log's steps and
    checkpoint saves (``ProcessorResult.progress``, for the failure's rhythm: :mod:`.rhythm`);
    0: not counted."""
    since_dt = _parse_since(since)
    catalog = catalog or load_catalog(signature_dirs, include_user=include_user)
    disc, warnings = _discover(paths, io_timeout)
    if confine is not None:
        kept = []
        for s in disc.sources:
            why = confine(s.path)
            if why:
                warnings.append(why)
            else:
                kept.append(s)
        disc.sources[:] = kept
    warnings += [f"signatures: {p}" for p in catalog.problems]
    small = sum(s.size for s in disc.sources) < HYPERSCAN_WORTH  # (a file that grows later: still correct)
    matcher = Matcher(catalog, error_words=False, small=small)
    job = JobState()
    job._matcher = matcher  # type: ignore[attr-defined]  # triage's line-by-line matches too (firstwarn)
    evidence = [s for s in disc.sources if s.kind in EVIDENCE_KINDS]
    disc.sources = [s for s in disc.sources if s.kind not in EVIDENCE_KINDS]
    for s in evidence + [s for s in disc.sources if s.also_ras]:
        read_evidence(s.path, "ras" if s.also_ras else s.kind, job, warnings)
    steps = progress_steps_max > 0 and sum(s.size for s in disc.sources) <= progress_steps_max
    _results(disc.sources, matcher, job, jobs=jobs, polite=polite, io_timeout=io_timeout, progress_steps=steps)
    for r in job.results.values():
        warnings.extend(r.errors)
    incidents = triage(job, catalog, read_tail=read_tail)
    if not incidents and disc.sources:
        # Nothing known failed: read again for error-looking lines no detector knows, so the
        # report can show them instead of "No failure found" (a second pass only in this case).
        unknown = JobState()
        _results([s for s in disc.sources if s.kind != "error-json"], matcher, unknown, jobs=jobs,
                 polite=polite, io_timeout=io_timeout, unknown_only=True)
        for key, r in unknown.results.items():
            cur = job.results.get(key)
            if cur is not None:
                cur.unknown = r.unknown
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
    if not disc.sources and not evidence:
        warnings.append(_NO_LOGS + ", ".join(paths))
    return ScanResult(
        job=job,
        findings=findings,
        incidents=incidents,
        warnings=warnings,
        catalog=catalog,
        bytes_read=sum(r.bytes for r in job.results.values()),
        backend=matcher.backend,
        filters={"rank": rank, "attempt": attempt, "since": iso(since_dt)},
    )


def _discover(paths: list[str], io_timeout: float | None):
    """Discovery under the watchdog: a hung mount named on the command line (or met while
    walking a directory) is a warning, and the other paths are still scanned."""
    sources = []
    warnings: list[str] = []
    for arg in paths:
        counter = {"n": 0}

        def one(arg=arg, counter=counter):
            return discover([arg], progress=counter, evidence=True)

        if io_timeout:
            done, d = watchdog(one, lambda counter=counter: counter["n"], io_timeout)
        else:
            done, d = True, one()
        if not done:
            # Keep what was found before the hang; name the directory that hung.
            where = counter.get("current") or arg
            warnings += list(counter.get("warnings", []))
            warnings.append(f"{where}: no answer for {io_timeout:.0f} s while listing it (hung filesystem?): skipped")
            found = sorted(counter.get("found", []))
            for i, path in enumerate(found):
                src = classify(path, i)
                src.size = counter.get("sizes", {}).get(path, 0)
                sources.append(src)
            continue
        sources += d.sources
        warnings += d.warnings
    seen: set[str] = set()
    uniq = []
    for s in sources:
        if s.path not in seen:
            seen.add(s.path)
            s.order = len(uniq)
            uniq.append(s)
    return Discovery(uniq, []), warnings
