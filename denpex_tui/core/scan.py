"""``denpex scan``: the history path of the pipeline over a finished (or running) job."""

from __future__ import annotations

import os
import threading
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
from .text import safe_str
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
        # a source that stopped answering after some of it was read still counts: what was
        # found in it is kept (see process_source)
        return sum(1 for r in self.job.results.values() if not r.errors or r.bytes)

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
            "versions": self.job.versions(),
            "findings": [f.to_json() for f in self.findings],
            "incidents": [i.to_json() for i in self.incidents],
            "unrecognised": [] if self.incidents else [
                {**u, "path": safe_str(u["path"])} for u in self.job.unknown_lines()],
            "warnings": list(self.warnings),
        }


_NO_LOGS = "no log files found in "
_WORKER: dict[str, Any] = {}
IO_TIMEOUT_S = 60.0


def _watchdog(fn, progress, timeout: float):
    """Run ``fn`` in a daemon thread; give up when ``progress()`` has not moved for
    ``timeout`` seconds (a hung NFS/FUSE mount blocks a read or a stat for minutes, or for
    ever, in a state no signal can interrupt). Returns ``(finished, result)``; an abandoned
    thread stays blocked in the kernel, harmlessly, until the process exits."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = fn()
        except BaseException as exc:  # handed to the caller
            box["error"] = exc

    t = threading.Thread(target=target, daemon=True, name="denpex-io")
    t.start()
    last = progress()
    quiet_since = time.monotonic()
    while True:
        t.join(0.1)
        if not t.is_alive():
            if "error" in box:
                raise box["error"]
            return True, box.get("result")
        now_p = progress()
        if now_p != last:
            last, quiet_since = now_p, time.monotonic()
        elif time.monotonic() - quiet_since >= timeout:
            return False, None


def _worker_init(sig_dirs: list[str] | None, include_user: bool, nice: int) -> None:
    if nice:
        try:
            os.nice(nice)
        except OSError:
            pass
    if "inherited" in _WORKER:  # forked: the parent's compiled matcher, no second catalog load
        _WORKER["matcher"] = _WORKER["inherited"]
        return
    cat = load_catalog(sig_dirs, include_user=include_user)
    _WORKER["matcher"] = Matcher(cat, error_words=False)


def _worker_run(info: SourceInfo) -> ProcessorResult:
    return process_source(info, _WORKER["matcher"])


def _year_hint(path: str) -> int | None:
    try:
        return datetime.fromtimestamp(os.stat(path).st_mtime).year
    except OSError:
        return None


def process_source(info: SourceInfo, matcher: Matcher, *, io_timeout: float | None = None) -> ProcessorResult:
    """One source through the pipeline. With ``io_timeout``, a read that makes no progress
    for that long (a hung mount) makes this source an error and the scan goes on; what was
    found in it before the read stopped answering is kept."""
    if io_timeout:
        box: dict[str, Any] = {"read": 0, "lock": threading.Lock()}
        done, res = _watchdog(lambda: _process(info, matcher, box), lambda: box["read"], io_timeout)
        if done:
            return res
        why = f"{info.path}: no progress for {io_timeout:.0f} s (hung filesystem?): skipped"
        lock = box["lock"]
        if lock.acquire(timeout=5.0):  # the reader is stuck in the kernel, not in the parser
            try:
                box["abandoned"] = True
                p = box.get("p")
                if p is not None:
                    p.close()
                    p.errors.append(why.replace(": skipped", ": the rest of it was skipped"))
                    return ProcessorResult.of(p)
            finally:
                lock.release()
        p = SourceProcessor(info, matcher)
        p.errors.append(why)
        return ProcessorResult.of(p)
    return _process(info, matcher, {})


def process_many(sources: list[SourceInfo], matcher: Matcher, io_timeout: float | None, add) -> None:
    """Every source through the pipeline in one worker thread under one watchdog (a thread per
    small file costs more than reading it: 10 000 rank files). A source that makes no progress
    for ``io_timeout`` is given up (a hung mount) with what it had found, as
    :func:`process_source` does, and the rest go on in a fresh thread; an abandoned thread never
    touches the job again."""
    if not io_timeout:
        for s in sources:
            add(_process(s, matcher, {}))
        return
    state = {"i": 0}
    while state["i"] < len(sources):
        box: dict[str, Any] = {"read": 0, "lock": threading.Lock()}

        def run(box=box) -> None:
            while state["i"] < len(sources):
                res = _process(sources[state["i"]], matcher, box)
                with box["lock"]:
                    if box.get("abandoned"):
                        return  # given up on while it was blocked: its result is stale
                    add(res)
                    state["i"] += 1
                    box["read"] = 0

        done, _ = _watchdog(run, lambda box=box: (state["i"], box["read"]), io_timeout)
        if done:
            return
        stuck = sources[state["i"]]
        why = f"{stuck.path}: no progress for {io_timeout:.0f} s (hung filesystem?): skipped"
        with box["lock"]:  # the reader is stuck in the kernel, not in the parser
            box["abandoned"] = True
            p = box.get("p")
            if p is not None and p.info is stuck:
                p.close()
                p.errors.append(why.replace(": skipped", ": the rest of it was skipped"))
            else:
                p = SourceProcessor(stuck, matcher)
                p.errors.append(why)
        add(ProcessorResult.of(p))
        state["i"] += 1


def _unknown_pass(sources: list[SourceInfo], matcher: Matcher, io_timeout: float | None, job: JobState) -> None:
    def add(res: ProcessorResult) -> None:
        cur = job.results.get(res.info.path)
        if cur is not None:
            cur.unknown = res.unknown

    process_many([s for s in sources if s.kind != "error-json"], matcher, io_timeout, add)


def _process(info: SourceInfo, matcher: Matcher, box: dict) -> ProcessorResult:
    lock = box.setdefault("lock", threading.Lock())
    p = SourceProcessor(info, matcher, year_hint=_year_hint(info.path))
    with lock:
        box["p"] = p
    try:
        if info.kind == "error-json":
            with open(info.path, "rb") as fh:
                blob = fh.read(_ERROR_JSON_MAX + 1)
            if len(blob) > _ERROR_JSON_MAX:
                p.errors.append(f"{info.path}: error file larger than 4 MiB: skipped")
            else:
                with lock:
                    if not box.get("abandoned"):
                        p.feed_error_json(blob)
        else:
            for off, data in read_chunks(info.path, progress=box):
                with lock:
                    if box.get("abandoned"):  # the watchdog gave up and kept what we found
                        break
                    p.feed(data, off)
            with lock:
                if not box.get("abandoned"):
                    p.close()
    except SourceError as exc:
        with lock:
            if not box.get("abandoned"):
                p.close()
                p.errors.append(str(exc))
    except OSError as exc:
        with lock:
            if not box.get("abandoned"):
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
    io_timeout: float | None = IO_TIMEOUT_S,
) -> ScanResult:
    """Scan ``paths`` (files, directories, globs) as one job."""
    t0 = time.perf_counter()
    since_dt = _parse_since(since)
    catalog = catalog or load_catalog(signature_dirs, include_user=include_user)
    matcher = Matcher(catalog, error_words=False)
    disc, warnings = _discover(paths, io_timeout)
    warnings += [f"signatures: {p}" for p in catalog.problems]
    job = JobState()
    total = 0
    for s in disc.sources:
        total += s.size
    n_jobs = jobs or (1 if polite else (os.cpu_count() or 1))
    if n_jobs > 1 and total >= _PARALLEL_MIN_BYTES and len(disc.sources) > 1:
        # Largest files first so the pool stays busy to the end.
        order = sorted(disc.sources, key=lambda s: -s.size)
        _parallel(order, job, n_jobs, signature_dirs, include_user, polite, io_timeout, matcher)
    else:
        process_many(disc.sources, matcher, io_timeout, job.add)
    first_diag = time.perf_counter() - t0
    for r in job.results.values():
        warnings.extend(r.errors)
    incidents = triage(job, catalog, read_tail=read_tail)
    if not incidents and disc.sources:
        # Nothing known failed: read again for error-looking lines no detector knows, so the
        # report can show them instead of "No failure found" (a second pass only in this case).
        _unknown_pass(disc.sources, Matcher(catalog), io_timeout, job)
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
        warnings.append(_NO_LOGS + ", ".join(paths))
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


def _discover(paths: list[str], io_timeout: float | None):
    """Discovery under the watchdog: a hung mount named on the command line (or met while
    walking a directory) is a warning, and the other paths are still scanned."""
    from .sources import Discovery

    sources = []
    warnings: list[str] = []
    for arg in paths:
        counter = {"n": 0}

        def one(arg=arg, counter=counter):
            return discover([arg], progress=counter)

        if io_timeout:
            done, d = _watchdog(one, lambda counter=counter: counter["n"], io_timeout)
        else:
            done, d = True, one()
        if not done:
            # Keep what was found before the hang; name the directory that hung.
            where = counter.get("current") or arg
            warnings += list(counter.get("warnings", []))
            warnings.append(f"{where}: no answer for {io_timeout:.0f} s while listing it (hung filesystem?): skipped")
            found = sorted(counter.get("found", []))
            from .sources import classify

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


def _parallel(order, job, n_jobs, signature_dirs, include_user, polite, io_timeout, matcher) -> None:
    """Files across processes. A file whose worker gives no result within a generous
    deadline (its size at 5 MB/s, and at least ``io_timeout``) is reported as hung."""
    from concurrent.futures import FIRST_COMPLETED, wait

    import multiprocessing

    ctx = None
    if "fork" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("fork")
        _WORKER["inherited"] = matcher  # the workers start with it compiled
    pool = ProcessPoolExecutor(
        max_workers=n_jobs,
        initializer=_worker_init,
        initargs=(signature_dirs, include_user, 10 if polite else 0),
        mp_context=ctx,
    )
    hung = False
    try:
        futures = {pool.submit(_worker_run, s): (s, time.monotonic()) for s in order}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
            for f in done:
                job.add(f.result())
            if not io_timeout:
                continue
            now = time.monotonic()
            running = [f for f in pending if f.running()]
            for f in running:
                s, t0 = futures[f]
                deadline = max(io_timeout, s.size / 5e6)
                if futures[f][1] == t0 and now - t0 > deadline:
                    p = SourceProcessor(s, matcher)
                    p.errors.append(f"{s.path}: no result after {deadline:.0f} s (hung filesystem?): skipped")
                    job.add(ProcessorResult.of(p))
                    pending.discard(f)
                    hung = True
            for f in pending:
                if not f.running():
                    futures[f] = (futures[f][0], now)  # its clock starts when a worker takes it
    finally:
        _WORKER.pop("inherited", None)
        if hung:
            for proc in list(getattr(pool, "_processes", {}).values()):
                proc.kill()
        pool.shutdown(wait=not hung, cancel_futures=True)
