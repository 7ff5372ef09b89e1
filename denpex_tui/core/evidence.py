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
out are named in README.txt).  Reading a bundle back is core/bundle_read.py's.
"""

from __future__ import annotations

import dataclasses
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
from .lines.reader import SourceError, read_lines
from .text import safe_line, safe_str

__all__ = ["BEFORE", "AFTER", "MAX_LINE", "MAX_BYTES", "KIND", "write_bundle", "excerpt"]

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


class Outside(OSError):
    """A file whose real path (links resolved) is not under the job's tree."""


def job_roots(paths: list[str]) -> list[str]:
    """The job's tree: each folder given (a file: its folder; a glob: the folder before its
    first wildcard), links resolved. Nothing outside it goes into a bundle."""
    roots = []
    for arg in paths:
        a = os.path.abspath(arg)
        if any(c in arg for c in "*?[") and not os.path.exists(arg):
            fixed = []
            for part in a.split(os.sep):
                if any(c in part for c in "*?["):
                    break
                fixed.append(part)
            a = os.sep.join(fixed) or os.sep
        elif not os.path.isdir(a):
            a = os.path.dirname(a)
        roots.append(os.path.realpath(a))
    return list(dict.fromkeys(roots))


def outside(path: str, roots: list[str]) -> str | None:
    """The real path of ``path`` when it is not under one of ``roots`` (else None)."""
    real = os.path.realpath(path)
    for r in roots:
        if real == r or real.startswith(r.rstrip("/") + "/"):
            return None
    return real


def _lines_inside(path: str, roots: list[str] | None):
    """``(line number, raw line)`` of ``path`` through the one reader of log bytes (the same
    numbering as the diagnosis, a line without end costs no memory), refused when what is read is
    outside ``roots``: the check is made on the open file (``/proc/self/fd``) and the reader must
    then read that same file, so a link swapped after the scan cannot slip in."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))  # a FIFO never blocks
    try:
        st = os.fstat(fd)
        if roots is not None:
            try:
                real = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                real = os.path.realpath(path)
            if outside(real, roots) is not None:
                raise Outside(f"{path}: leads outside the job's tree (to {real})")
    finally:
        os.close(fd)
    box: dict = {}
    try:
        for n, _off, raw in read_lines(path, progress=box):
            if box.get("ident") != (st.st_dev, st.st_ino):
                raise Outside(f"{path}: replaced while it was read")
            yield n, raw
    except SourceError as exc:
        raise OSError(str(exc)) from None


def excerpt(path: str, line: int, before: int = BEFORE, after: int = AFTER,
            roots: list[str] | None = None) -> tuple[int, int, str]:
    """Lines ``line-before .. line+after`` of ``path`` (1-based), numbered, as safe text."""
    lo = max(1, line - before)
    out = []
    last = lo - 1
    for n, raw in _lines_inside(path, roots):
        if n < lo:
            continue
        if n > line + after:
            break
        raw = raw.rstrip(b"\r")
        cut = len(raw) > MAX_LINE
        text = safe_line(raw[:MAX_LINE]).text + (" [line cut at 4 KiB]" if cut else "")
        out.append(f"{'>' if n == line else ' '}{n:>8}: {text}")
        last = n
    return lo, last, "\n".join(out) + "\n"


def _line_at(path: str, t, roots: list[str] | None = None) -> int | None:
    """The last line of ``path`` logged at or before ``t`` (the rank's other file: its stdout
    when the traceback went to stderr), or its last line when ``t`` is unknown."""
    from .lines.facts import line_facts

    best, n = None, 0
    tt = t.replace(tzinfo=None) if t is not None else None
    for n, raw in _lines_inside(path, roots):
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
    redacted: dict[str, str] = field(default_factory=dict)  # file -> what was redacted in it
    ruleset: str = ""


def write_bundle(result, out: str, *, argv: list[str], diagnosis_text: str, snapshot=None,
                 differential=None, baseline=None, first_warnings: dict | None = None,
                 env: dict[str, tuple[list[str], Callable[[], str]]] | None = None,
                 roots: list[str] | None = None) -> Bundle:
    """Write the bundle for a scan ``result`` to ``out`` (a folder, or ``*.tar.gz``).

    ``roots``: the job's tree (:func:`job_roots`); a file whose real path is outside it is
    never read into the bundle. Every file is redacted (core/redact.py) as it is written. The
    bundle appears whole or not at all: it is made in a work folder next to ``out`` (a ``.part``
    file for a tar) that a failure (a full filesystem) removes, so a retry is never blocked."""
    from .redact import redactor

    as_tar = out.endswith((".tar.gz", ".tgz"))
    final = out
    if os.path.exists(final) and (as_tar or os.listdir(final)):
        raise FileExistsError(f"{final}: exists already (evidence never overwrites)")
    parent = os.path.dirname(os.path.abspath(final))
    work = tempfile.mkdtemp(prefix=f".{os.path.basename(final)}.part-", dir=parent)
    tmp = final + ".part" if as_tar else None
    try:
        red = redactor()
        w = _Writer(work, red, Bundle(final, ruleset=red.ruleset), roots, MAX_BYTES)
        w.rank_excerpts(result)
        w.flight_recorder(result)
        doc = _diagnosis_doc(result, argv, first_warnings, w.excerpts, baseline, w.b.left_out)
        w.put("diagnosis.json", doc=doc)
        w.put("diagnosis.txt", diagnosis_text)
        if snapshot is not None:
            probe = {"note": "measured when the bundle was made, on the node named by host: not at failure time; "
                             "only the job's own processes",
                     "snapshot": schema.snapshot_to_json(snapshot),
                     "differential": schema.differential_to_json(differential) if differential is not None else None}
            w.put("probe.json", doc=probe)
        for rel, (cmd, run) in (env or {}).items():
            w.put(f"env/{rel}", "$ " + " ".join(cmd) + "\n" + run())
        w.put("README.txt", _readme(doc, w.b, snapshot, env))
        b = w.b
        if as_tar:
            top = os.path.basename(final)[: -len(".tar.gz") if final.endswith(".tar.gz") else -len(".tgz")] \
                or "evidence"
            with tarfile.open(tmp, "w:gz") as tar:  # diagnosis.json first: read back without reading the rest
                tar.add(work, arcname=top, recursive=False)
                first = ["diagnosis.json", "README.txt"]
                for rel in first + sorted(x for x in os.listdir(work) if x not in first):
                    tar.add(os.path.join(work, rel), arcname=f"{top}/{rel}")
            os.replace(tmp, final)
            tmp = None
            shutil.rmtree(work, ignore_errors=True)
        else:
            os.chmod(work, 0o755 & ~_umask())
            os.replace(work, final)  # onto an empty folder too
        return b
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        raise


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


@dataclass
class _Writer:
    """Files of one bundle being written into ``work``: each redacted as it is written, paid
    from the ``MAX_BYTES`` budget, listed in ``b.files`` (what was redacted in ``b.redacted``)."""

    work: str
    red: Any
    b: Bundle
    roots: list[str] | None
    budget: int
    excerpts: list[Excerpt] = field(default_factory=list)

    def put(self, rel: str, text: str | None = None, doc: Any = None) -> None:
        red, b = self.red, self.b
        before = dict(red.counts)
        if doc is not None:
            text = json.dumps(red.value(doc), ensure_ascii=False, indent=1) + "\n"
        else:
            text = red.text(text or "")
        found = {k: n - before.get(k, 0) for k, n in red.counts.items() if n - before.get(k, 0)}
        if found:
            b.redacted[rel] = ", ".join(f"{n} {k}" for k, n in sorted(found.items()))
        data = text.encode("utf-8", "backslashreplace")  # a lone surrogate (a hostile argv in the snapshot)
        p = os.path.join(self.work, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as fh:
            fh.write(data)
        b.files[rel] = len(data)
        self.budget -= len(data)

    def rank_excerpts(self, result) -> None:
        """For the initiating rank and each collateral (and same-cause) one: the first line of
        its signature in its own file, and its other files around the failure's time."""
        roots, left_out = self.roots, self.b.left_out
        for role, f in _findings_to_excerpt(result):
            who = f"rank {f.rank}" if f.rank is not None else "rank ?"
            if self.budget <= 0:
                left_out.append(f"{who} ({role}, {f.signature}): over the {MAX_BYTES >> 20} MiB cap")
                continue
            try:
                lo, hi, text = excerpt(f.path, f.line, roots=roots)
            except Outside as exc:
                left_out.append(f"{who} ({role}): {safe_str(str(exc))}: not copied")
                continue
            except OSError as exc:
                left_out.append(f"{who} ({role}): {safe_str(f.path)} unreadable ({exc.strerror or exc})")
                continue
            name = _NAME.sub("_", f"rank{f.rank if f.rank is not None else 'X'}-{role}-{f.signature}")
            head = (f"# {safe_str(f.path)} lines {lo}-{hi}: the first {f.signature} of rank {f.rank} ({role}) "
                    f"at line {f.line} (marked >)\n")
            self.put(f"excerpts/{name}.txt", head + text)
            self.excerpts.append(Excerpt(f.rank, role, f.signature, f.path, f.line, lo, hi, text))
            self._other_files(result, role, f, name, who)

    def _other_files(self, result, role: str, f, name: str, who: str) -> None:
        """The rank's other files, each up to the time of its first finding."""
        for s in result.job.sources():
            if s.ranks != [f.rank] or s.path == f.path or s.kind == "error-json" or f.rank is None:
                continue
            try:
                at = _line_at(s.path, f.time, self.roots)
                if at is None:
                    continue
                lo, hi, text = excerpt(s.path, at, roots=self.roots)
            except Outside as exc:
                self.b.left_out.append(f"{who} ({role}, other file): {safe_str(str(exc))}: not copied")
                continue
            except OSError:
                continue
            other = _NAME.sub("_", os.path.basename(s.path))
            head = (f"# {safe_str(s.path)} lines {lo}-{hi}: rank {f.rank}'s other file, around the time of its "
                    f"first {f.signature} (line {at}, marked >, is the last one logged at or before it)\n")
            self.put(f"excerpts/{name}.{other}.txt", head + text)
            self.excerpts.append(Excerpt(f.rank, role + " (same rank, other file)", f.signature, s.path, at, lo, hi, text))

    def flight_recorder(self, result) -> None:
        """The Flight Recorder dumps the diagnosis used, as read (plain JSON: a pickle is never
        copied on)."""
        fr = result.job.flight_recorder() if hasattr(result.job, "flight_recorder") else None
        for r, d in sorted((fr.dumps if fr else {}).items()):
            body = {"path": safe_str(d.path), "rank": r, "format": d.fmt, "version": d.version,
                    "pg_config": {k: [v[0], list(v[1])] for k, v in d.pg_config.items()}, "pg_status": d.pg_status,
                    "entries": [dataclasses.asdict(e) for e in d.entries]}
            text = json.dumps(body, ensure_ascii=False) + "\n"
            if len(text) > self.budget:
                self.b.left_out.append(f"rank {r}'s Flight Recorder dump: over the {MAX_BYTES >> 20} MiB cap")
                continue
            self.put(f"flight_recorder/rank{r}.json", text)


def _diagnosis_doc(result, argv: list[str], first_warnings: dict | None, excerpts: list[Excerpt], baseline,
                   left_out: list[str]) -> dict:
    """diagnosis.json: the scan in core/schema.py forms, so ``denpex scan BUNDLE`` shows it again."""
    return {
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
        "left_out": list(left_out),
    }


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
    lines += ["", f"Secrets: every file is redacted as it is written ({b.ruleset}); a secret is replaced by "
              "[redacted: KIND], the rest of its line is kept."]
    lines += [f"  {rel}: {what}" for rel, what in sorted(b.redacted.items())] or ["  nothing was redacted"]
    return "\n".join(lines) + "\n"


# -- reading back -------------------------------------------------------------------------
