"""Everything given on one command line is one job: merge what each source saw.

* Local ranks (torchrun's ``[defaultM]:`` and ``attempt_N/M/`` folders) are mapped to global
  ranks per node from the pairs the logs themselves show (``[default2]:[rank2]:``,
  failure-report ``rank: 2 (local_rank: 0)``, DeepSpeed's ``global_rank_mapping``); when a
  node shows one consistent offset (global = local + k) it is applied to the node's other
  local ranks; a job with a single node and no pair maps local = global. What could not be
  mapped is said, not guessed.
* The same line reaching Denpex twice (a ``--tee`` console and the per-rank file, the failure
  report, error.json) counts once, and the finding points at the per-rank file's copy.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .frdump import FRDump
from .frtrace import FRReport, analyse
from .lines.ranks import RankResolver, build_resolver
from .model import FailureEntry, Finding, LastLine, Marker, SourceInfo, StopMark, finding_key
from .pipeline import SourceProcessor
from .ras import RasReport
from .text import safe_str

if TYPE_CHECKING:
    from .firsterror import FirstError

__all__ = ["JobState", "SourceSummary"]


@dataclass
class SourceSummary:
    path: str
    kind: str
    ranks: list[int]
    node: str | None
    lines: int
    bytes: int
    error: str | None = None

    def to_json(self) -> dict:
        return {
            "path": safe_str(self.path),
            "kind": self.kind,
            "ranks": self.ranks,
            "node": self.node,
            "lines": self.lines,
            "bytes": self.bytes,
            **({"error": self.error} if self.error else {}),
        }


@dataclass
class ProcessorResult:
    """What a processor hands to the job (picklable: scan runs processors in other processes)."""

    info: SourceInfo
    findings: list[Finding]
    failure_entries: list[FailureEntry]
    markers: list[Marker]
    marker_counts: dict
    last_lines: list[LastLine]
    rank_pairs: set
    keys_seen: dict
    versions: dict
    lines: int
    bytes: int
    errors: list[str] = field(default_factory=list)
    unknown: dict = field(default_factory=dict)
    first_time: Any = None
    first_error: tuple | None = None  # (line, epoch or None): a rank file's first error line
    stop_marks: list[StopMark] = field(default_factory=list)  # each rank stream's last progress line
    progress: Any = None  # its steps and checkpoint saves (progress.Progress), when scan counted them as it read

    @classmethod
    def of(cls, p: SourceProcessor) -> "ProcessorResult":
        return cls(
            info=p.info,
            findings=list(p.findings.values()),
            failure_entries=list(p.failure_entries),
            markers=[m for lst in p.markers.values() for m in lst],
            marker_counts=dict(p.marker_counts),
            last_lines=list(p.last_lines.values()),
            rank_pairs=set(p.rank_pairs),
            keys_seen={k: set(v) for k, v in p.keys_seen.items()},
            versions=dict(p.versions),
            lines=p.line_no,
            bytes=p.bytes_read,
            errors=list(p.errors),
            unknown={k: list(v) for k, v in p.unknown.items()},
            first_time=p.first_time,
            first_error=p.first_error,
            stop_marks=list(getattr(p, "stop_marks", {}).values()),
        )


def _cmp_key(t) -> float:
    return t.timestamp()


def _epoch(t) -> float | None:
    try:
        return t.timestamp() if t is not None else None
    except (OverflowError, OSError, ValueError):
        return None


class JobState:
    def __init__(self) -> None:
        self.results: dict[str, ProcessorResult] = {}
        self.warnings: list[str] = []
        self._resolved = False
        self._resolver_cache: RankResolver | None = None
        # evidence that is not lines: Flight Recorder dumps and NCCL RAS reports, by path
        self.dumps: dict[str, FRDump] = {}
        self.ras: dict[str, RasReport] = {}
        self._fr: tuple | None = None

    def add(self, r: ProcessorResult, key: str | None = None) -> None:
        self.results[key or r.info.path] = r
        self.changed()

    def changed(self) -> None:
        """A result was added or replaced: ranks are resolved again when next asked."""
        self._resolved = False
        self._resolver_cache = None

    def add_dump(self, d: FRDump) -> None:
        self.dumps[d.path] = d
        self._fr = None

    def add_ras(self, r: RasReport) -> None:
        self.ras[r.path] = r

    def ras_reports(self) -> list[RasReport]:
        return [r for r in self.ras.values() if not r.empty]

    def flight_recorder(self) -> FRReport | None:
        """What the job's dumps say together (ranks the logs show count as members too)."""
        if not self.dumps:
            return None
        by_attempt = self.ranks_by_attempt()
        ranks = by_attempt.get(max(by_attempt), set()) if by_attempt else set()
        world = max(ranks) + 1 if ranks and max(ranks) < 1 << 20 else None
        key = (len(self.dumps), tuple(sorted((p, d.newest, d.mtime) for p, d in self.dumps.items())), world)
        if self._fr is None or self._fr[0] != key:
            self._fr = (key, analyse(list(self.dumps.values()), world))
        return self._fr[1]

    # -- rank mapping ---------------------------------------------------------------------

    def resolver(self) -> RankResolver:
        """The one local -> global rank resolver of the job (from the pairs its logs show)."""
        if self._resolver_cache is not None:
            return self._resolver_cache
        pairs: dict[str, dict[int, set[int]]] = {}
        nodes: set[str] = set()
        for r in self.results.values():
            nk = r.info.node_key or ""
            nodes.add(nk)
            for local, g in r.rank_pairs:
                pairs.setdefault(nk, {}).setdefault(local, set()).add(g)
            for fe in r.failure_entries:
                if fe.local_rank is not None and fe.rank >= 0:
                    pairs.setdefault(nk, {}).setdefault(fe.local_rank, set()).add(fe.rank)
        needs = {r.info.node_key or "" for r in self.results.values()
                 if any(kind == "l" for keys in r.keys_seen.values() for kind, _ in keys)
                 or any(f.local_rank is not None and f.rank is None for f in r.findings)}
        self._resolver_cache = build_resolver(pairs, nodes, needs)
        return self._resolver_cache

    def resolve(self) -> None:
        if self._resolved:
            return
        rr = self.resolver()
        self.unmapped: set[tuple[str, int]] = set()

        def res(node_key: str | None, rank: int | None, local: int | None) -> int | None:
            g = rr.resolve(node_key, rank, local)
            if g is None and local is not None:
                self.unmapped.add((node_key or "", local))
            return g

        names = self.node_names()
        for r in self.results.values():
            for f in r.findings:
                f.rank = res(f.node_key, f.rank, f.local_rank)
                f.node = names.get(f.node_key or "")
            for ll in r.last_lines:
                ll.key_rank = res(ll.node_key, ll.key_rank, ll.key_local)
            for sm in r.stop_marks:
                sm.key_rank = res(sm.node_key, sm.key_rank, sm.key_local)
            for m in r.markers:
                m.rank = res(m.node_key, m.rank, m.local_rank)
        self._resolver = res
        self._resolved = True

    def node_names(self) -> dict[str, str | None]:
        """Display names: the host name the logs give when it tells nodes apart, else the
        per-node folder name when there are several nodes, else the host name or None."""
        hosts: dict[str, set[str]] = {}
        keys: set[str] = set()
        for r in self.results.values():
            nk = r.info.node_key or ""
            keys.add(nk)
            for f in r.findings:
                if f.host:
                    hosts.setdefault(nk, set()).add(f.host)
            for fe in r.failure_entries:
                if fe.host:
                    hosts.setdefault(nk, set()).add(fe.host)
        single = {nk: next(iter(h)) for nk, h in hosts.items() if len(h) == 1}
        distinct = len(set(single.values())) == len(single) == len(keys)
        out: dict[str, str | None] = {}
        for nk in keys:
            if distinct and nk in single:
                out[nk] = single[nk]
            elif len(keys) > 1:
                out[nk] = os.path.basename(nk.rstrip("/")) or nk
            else:
                out[nk] = single.get(nk)
        return out

    # -- merged views ---------------------------------------------------------------------

    def findings(self) -> list[Finding]:
        """Findings with ranks resolved and duplicate copies merged (best copy kept)."""
        self.resolve()
        best: dict[tuple, Finding] = {}
        for r in self.results.values():
            for f in r.findings:
                # Without a global rank, copies cannot be matched across files: keyed by file.
                k = finding_key(f)
                cur = best.get(k)
                if cur is None:
                    best[k] = f
                    continue
                # Same line seen in several copies: keep the per-rank file's copy, take the
                # largest count (copies repeat the same occurrences), and the exact time.
                keep, other = (f, cur) if f.priority > cur.priority else (cur, f)
                if keep.time is None or (keep.time_approx and other.time is not None and not other.time_approx):
                    keep.time, keep.time_approx = other.time, other.time_approx
                keep.count = max(keep.count, other.count)
                best[k] = keep
        out = list(best.values())
        ranked = {(f.attempt, f.signature, f.text) for f in out if f.rank is not None}
        out = [f for f in out if f.rank is not None or (f.attempt, f.signature, f.text) not in ranked]
        out.sort(key=lambda f: f.sort_key())
        return out

    def ranks(self) -> list[int]:
        """Every rank the job shows: its sources' lines and the launcher's failure reports. The
        one count every face (scan's report, --json, the watch header) gives."""
        out: set[int] = set()
        for s in self.sources():
            out.update(s.ranks)
        for rs in self.ranks_by_attempt().values():
            out.update(rs)
        return sorted(out)

    def ranks_by_attempt(self) -> dict[int, set[int]]:
        self.resolve()
        out: dict[int, set[int]] = {}
        for r in self.results.values():
            nk = r.info.node_key
            for attempt, keys in r.keys_seen.items():
                for kind, n in keys:
                    g = n if kind == "r" else self._resolver(nk, None, n)
                    if g is not None:
                        out.setdefault(attempt, set()).add(g)
            for fe in r.failure_entries:
                if fe.rank >= 0:
                    out.setdefault(fe.attempt, set()).add(fe.rank)
        return out

    def last_lines(self) -> dict[tuple[int, int], LastLine]:
        """(attempt, rank) -> last timestamped line, the per-rank file's copy preferred."""
        self.resolve()
        out: dict[tuple[int, int], LastLine] = {}
        for r in self.results.values():
            for ll in r.last_lines:
                if ll.key_rank is None:
                    continue
                k = (ll.attempt, ll.key_rank)
                cur = out.get(k)
                if cur is None or (ll.time and cur.time and ll.time > cur.time) or (
                    ll.time == cur.time and ll.priority > cur.priority
                ):
                    out[k] = ll
        return out

    def stop_marks(self) -> dict[tuple[int, int], StopMark]:
        """(attempt, rank) -> the rank's last progress line (:mod:`.stopmarks`), the per-rank
        file's copy preferred, else the furthest."""
        self.resolve()
        out: dict[tuple[int, int], StopMark] = {}
        for r in self.results.values():
            for m in r.stop_marks:
                if m.key_rank is None:
                    continue
                k = (m.attempt, m.key_rank)
                cur = out.get(k)
                if cur is None or (m.priority, m.step) > (cur.priority, cur.step):
                    out[k] = m
        return out

    def unknown_lines(self) -> list[dict]:
        """Error-looking lines that no detector knows, per source and rank (first 5 each)."""
        self.resolve()
        out = []
        for r in sorted(self.results.values(), key=lambda r: r.info.order):
            for (attempt, g, local), lst in r.unknown.items():
                rank = self._resolver(r.info.node_key, g, local)
                if rank is None and r.info.kind != "console":
                    rank = r.info.file_rank if r.info.file_rank is not None else r.info.exec_rank
                for line, text in lst:
                    out.append({"attempt": attempt, "rank": rank, "path": r.info.path, "line": line, "text": text})
        return out

    def node_times(self) -> dict[str, tuple]:
        """Per node: (first, last) timestamp its sources show (the clock-skew evidence)."""
        out: dict[str, list] = {}
        for r in self.results.values():
            nk = r.info.node_key or ""
            cur = out.setdefault(nk, [None, None])
            ft = r.first_time
            if ft is not None and (cur[0] is None or _cmp_key(ft) < _cmp_key(cur[0])):
                cur[0] = ft
            for ll in r.last_lines:
                if ll.time is not None and (cur[1] is None or _cmp_key(ll.time) > _cmp_key(cur[1])):
                    cur[1] = ll.time
        return {k: (v[0], v[1]) for k, v in out.items()}

    def first_errors(self) -> dict[int, "FirstError"]:
        """Per rank, its earliest own first error line over its per-rank files (exact before
        approximate at the same time); an untimed traceback is placed after the rank's last
        timestamped line."""
        from .firsterror import FirstError

        self.resolve()
        lasts = self.last_lines()
        out: dict[int, FirstError] = {}
        for r in self.results.values():
            if r.first_error is None or r.info.kind not in ("rank-file", "exec"):
                continue
            rank = r.info.file_rank if r.info.file_rank is not None else r.info.exec_rank
            if rank is None:
                rank = self.resolver().global_of(r.info.node_key, r.info.local_rank)
            if rank is None:
                continue
            line, epoch = r.first_error
            approx = epoch is None
            if approx:
                ll = lasts.get((r.info.attempt or 0, rank))
                epoch = _epoch(ll.time) if ll is not None else None
                if epoch is None:
                    continue
            fe = FirstError(rank, epoch, approx, r.info.path, line)
            cur = out.get(rank)
            if cur is None or (fe.time, fe.approx) < (cur.time, cur.approx):
                out[rank] = fe
        return out

    def failure_entries(self) -> list[FailureEntry]:
        return [fe for r in self.results.values() for fe in r.failure_entries]

    def markers(self) -> list[Marker]:
        self.resolve()
        return [m for r in self.results.values() for m in r.markers]

    def versions(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for r in self.results.values():
            for k, v in r.versions.items():
                out.setdefault(k, v)
        return out

    def sources(self) -> list[SourceSummary]:
        self.resolve()
        names = self.node_names()
        out = []
        for r in sorted(self.results.values(), key=lambda r: r.info.order):
            ranks: set[int] = set()
            for keys in r.keys_seen.values():
                for kind, n in keys:
                    g = n if kind == "r" else self._resolver(r.info.node_key, None, n)
                    if g is not None:
                        ranks.add(g)
            out.append(
                SourceSummary(
                    path=r.info.path,
                    kind=r.info.kind,
                    ranks=sorted(ranks),
                    node=names.get(r.info.node_key or ""),
                    lines=r.lines,
                    bytes=r.bytes,
                    error=r.errors[0] if r.errors else None,
                )
            )
        return out
